"""POST /v1/messages: Anthropic's Messages API over the same jobs as the OpenAI routes.

A request becomes a chat job like any other: the system prompt and messages, with their
tool_use and tool_result blocks, become the job's canonical chat (contracts/chat.py) and
are rendered by the model's own template on the node; tool_choice any or tool decodes
under the grammar of calls. The answer is a message of text and tool_use blocks, with
stop_reason end_turn, max_tokens, stop_sequence or tool_use; streamed, it is Anthropic's
events (message_start, content_block_start/delta/stop, message_delta, message_stop).
The key comes as `x-api-key` (Anthropic's clients) or `Authorization: Bearer`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import FastAPI, Header, Request
from fastapi.responses import Response

from contracts.chat import FUNCTION_CHOICE, NO_TOOLS, ChatMessage, ChatTools, ToolCall, canonical_json
from contracts.tool_calls import CallReader, ParsedCall, parse_tool_calls
from coordinator.errors import InvalidRequest, Unauthenticated
from coordinator.gateway.anthropic_schemas import (
    AnthropicError,
    AssistantMessage,
    MessageOut,
    MessagesRequest,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from coordinator.gateway.bridge import Bridge, JobEvents
from coordinator.gateway.completions import Answer, failure_error, run_completion
from coordinator.gateway.errors import anthropic_error_body, http_error_for
from coordinator.gateway.render import ended_well, finish_reason, job_usage
from coordinator.gateway.requests import TEMPERATURE_DEFAULT, ResponsePlan, seed_for
from coordinator.jobs.stops import StopScanner
from coordinator.jobs.submission import Submission
from coordinator.model import ERROR_STOP_SEQUENCE, JobRecord, TokenChunk
from coordinator.money.api_keys import Caller
from coordinator.service import JobView

_ERROR = {"model": AnthropicError}
_STREAM = {"text/event-stream": {"schema": {"type": "string"}, "description":
           "with stream=true: Anthropic's events, message_start to message_stop"}}


def _text(content: str | list[TextBlock]) -> str:
    return content if isinstance(content, str) else "".join(block.text for block in content)


def _chat_messages(message: UserMessage | AssistantMessage) -> list[ChatMessage]:
    """One Anthropic message as chat messages: tool results become tool messages of their own."""
    if isinstance(message.content, str):
        return [ChatMessage(message.role, message.content)]
    texts = [b.text for b in message.content if isinstance(b, TextBlock)]
    calls = tuple(ToolCall(b.id, b.name, json.dumps(b.input, ensure_ascii=False))
                  for b in message.content if isinstance(b, ToolUseBlock))
    results = [ChatMessage("tool", _text(b.content), (), b.tool_use_id)
               for b in message.content if isinstance(b, ToolResultBlock)]
    if message.role == "assistant":
        return [ChatMessage("assistant", "".join(texts), calls)]
    return results + ([ChatMessage("user", "".join(texts))] if texts or not results else [])


def _tools(body: MessagesRequest) -> ChatTools:
    choice = body.tool_choice
    if not body.tools:
        if choice is not None and choice.type in ("any", "tool"):
            raise InvalidRequest("tool_choice asks for a call, but the request offers no tools",
                                 param="tool_choice")
        return NO_TOOLS
    names = [tool.name for tool in body.tools]
    if len(set(names)) != len(names):
        raise InvalidRequest("tools holds two tools of one name", param="tools")
    kind = choice.type if choice is not None else "auto"
    if kind == "tool" and (choice is None or choice.name not in names):
        raise InvalidRequest("tool_choice of type tool must name one of the tools", param="tool_choice")
    definitions = tuple(canonical_json({"type": "function", "function": {
        "name": tool.name, **({"description": tool.description} if tool.description else {}),
        "parameters": tool.input_schema}}) for tool in body.tools)
    chosen = {"auto": "auto", "any": "required", "none": "none"}.get(kind)
    parallel = not (choice is not None and choice.disable_parallel_tool_use)
    return ChatTools(definitions, chosen or FUNCTION_CHOICE + str(choice.name if choice else ""),
                     parallel)


def messages_submission(body: MessagesRequest, caller: Caller,
                        request_id: str = "") -> tuple[Submission, ResponsePlan]:
    system = [ChatMessage("system", _text(body.system))] if body.system else []
    messages = tuple(system + [m for message in body.messages for m in _chat_messages(message)])
    tools = _tools(body)
    stops = tuple(body.stop_sequences or ())
    submission = Submission(
        consumer_id=caller.consumer_id, model_id=body.model, prompt="", max_tokens=body.max_tokens,
        temperature=TEMPERATURE_DEFAULT if body.temperature is None else body.temperature,
        top_p=body.top_p or 1.0, seed=seed_for(None), request_id=request_id,
        min_decode_tokens_per_s=0.0, messages=messages, stop=stops,
        api_key_id=caller.key.key_id if caller.key else None, tools=tools)
    reads_calls = bool(tools.definitions) and tools.choice != "none"
    plan = ResponsePlan("chat", body.model, bool(body.stream), True, False, 0, stops, reads_calls)
    return submission, plan


# --- answers -----------------------------------------------------------------

def _tool_use(job_id: str, index: int, call: ParsedCall) -> dict:
    return {"type": "tool_use", "id": f"toolu_{job_id}_{index}", "name": call.name,
            "input": json.loads(call.arguments)}


def _stop_reason(job: JobRecord, stopped: bool, called: bool) -> str:
    if called:
        return "tool_use"
    if stopped:
        return "stop_sequence"
    return "end_turn" if finish_reason(job, False) == "stop" else "max_tokens"


def _matched_stop(text: str, stops: tuple[str, ...]) -> str | None:
    found = [(index, stop) for stop in stops if (index := text.find(stop)) >= 0]
    return min(found)[1] if found else None


def _usage(job: JobRecord, streamed: int) -> dict:
    counts = job_usage(job, streamed)
    return {"input_tokens": counts["prompt_tokens"], "output_tokens": counts["completion_tokens"],
            "cache_read_input_tokens": counts["prompt_tokens_details"]["cached_tokens"]}


def whole_message(plan: ResponsePlan, job: JobRecord, chunks: list[TokenChunk]) -> dict:
    full = "".join(chunk.text for chunk in chunks)
    stop = _matched_stop(full, plan.stop)
    text = full[:full.index(stop)] if stop is not None else full
    calls = parse_tool_calls(text).calls if plan.tool_calls else ()
    content: list[dict] = []
    shown = parse_tool_calls(text).content.strip() if calls else text
    if shown or not calls:
        content.append({"type": "text", "text": shown})
    content += [_tool_use(job.job_id, index, call) for index, call in enumerate(calls)]
    return {"id": f"msg_{job.job_id}", "type": "message", "role": "assistant", "model": plan.model,
            "content": content, "stop_reason": _stop_reason(job, stop is not None, bool(calls)),
            "stop_sequence": stop,
            "usage": _usage(job, sum(len(chunk.token_ids) for chunk in chunks))}


def event(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"


class _Blocks:
    """Content blocks as events: text blocks opened as text comes, one block per tool call."""

    def __init__(self, job_id: str) -> None:
        self._job_id, self._index, self._text_open, self.calls = job_id, 0, False, 0

    def text(self, text: str) -> str:
        if not text:
            return ""
        out = ""
        if not self._text_open:
            out += event("content_block_start", {"index": self._index,
                                                 "content_block": {"type": "text", "text": ""}})
            self._text_open = True
        return out + event("content_block_delta", {"index": self._index,
                                                   "delta": {"type": "text_delta", "text": text}})

    def close(self) -> str:
        if not self._text_open:
            return ""
        self._text_open = False
        self._index += 1
        return event("content_block_stop", {"index": self._index - 1})

    def tool(self, call: ParsedCall) -> str:
        out = self.close()
        block = {**_tool_use(self._job_id, self.calls, call), "input": {}}
        out += event("content_block_start", {"index": self._index, "content_block": block})
        out += event("content_block_delta", {"index": self._index, "delta": {
            "type": "input_json_delta", "partial_json": call.arguments}})
        out += event("content_block_stop", {"index": self._index})
        self._index += 1
        self.calls += 1
        return out


async def stream_message(bridge: Bridge, plan: ResponsePlan, events: JobEvents,
                         first: TokenChunk | JobView, caller: Caller, created_s: int) -> AsyncIterator[str]:
    """The job as Anthropic's events; cancels the job if the client leaves before its end."""
    scanner, reader, blocks = StopScanner(plan.stop), CallReader(), _Blocks(events.job_id)
    finished, streamed, raw = False, 0, ""
    item = first
    try:
        yield event("message_start", {"message": {
            "id": f"msg_{events.job_id}", "type": "message", "role": "assistant", "model": plan.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}})
        while isinstance(item, TokenChunk):
            streamed += len(item.token_ids)
            if not scanner.stopped:
                raw += item.text
                yield _shown(blocks, reader, plan, scanner.feed(item.text))
                if scanner.stopped:
                    bridge.cancel_soon(events.job_id, caller, ERROR_STOP_SEQUENCE)
            item = await events.next()
        finished = True
        job = item.job
        if not ended_well(job):
            await bridge.call(bridge.service.money.close_billing, events.job_id)
            error = failure_error(job)
            yield event("error", {"error": anthropic_error_body(http_error_for(error).status,
                                                                str(error))["error"]})
            return
        ending = _shown(blocks, reader, plan, scanner.flush())
        if plan.tool_calls:
            ending += _shown(blocks, reader, plan, None)
        ending += blocks.close()
        stop = _matched_stop(raw, plan.stop) if scanner.stopped else None
        yield ending + event("message_delta", {
            "delta": {"stop_reason": _stop_reason(job, scanner.stopped, blocks.calls > 0),
                      "stop_sequence": stop}, "usage": _usage(job, streamed)})
        yield event("message_stop", {})
    finally:
        events.close()
        if not finished:
            bridge.cancel_soon(events.job_id, caller)


def _shown(blocks: _Blocks, reader: CallReader, plan: ResponsePlan, text: str | None) -> str:
    """Events for newly released text (None: the output's end), calls read out of it."""
    if not plan.tool_calls:
        return blocks.text(text or "")
    before = len(reader.calls)
    content = reader.finish() if text is None else reader.feed(text)
    out = blocks.text(content)
    for call in reader.calls[before:]:
        out += blocks.tool(call)
    return out


ANTHROPIC_ANSWER = Answer(whole_message, stream_message)


async def _key(request: Request) -> str | None:
    """x-api-key as Anthropic's clients send it, or a bearer token."""
    if key := request.headers.get("x-api-key"):
        return key
    authorization = request.headers.get("authorization")
    if not authorization:
        return None
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        raise Unauthenticated("send the API key as `x-api-key: <key>` or `Authorization: Bearer <key>`")
    return credentials.strip()


def add_messages_route(app: FastAPI, bridge: Bridge, errors: dict) -> None:
    @app.post("/v1/messages", response_model=MessageOut,
              responses={200: {"content": _STREAM}, **{status: _ERROR for status in errors}},
              summary="Create a message (Anthropic's Messages API)")
    async def messages(body: MessagesRequest, request: Request,
                       x_api_key: Annotated[str | None, Header(alias="x-api-key")] = None,
                       idempotency_key: Annotated[str, Header(alias="idempotency-key",
                                                              max_length=128)] = "") -> Response:
        key = x_api_key or await _key(request)
        return await run_completion(bridge, request, key,
                                    lambda who: messages_submission(body, who, idempotency_key),
                                    ANTHROPIC_ANSWER)

