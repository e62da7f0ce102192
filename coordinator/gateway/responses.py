"""POST /v1/responses: OpenAI's Responses API, the subset agents use, over the same chat jobs.

Input items (messages, function_call, function_call_output) and instructions become the
job's canonical chat, rendered by the model's template on the node; function tools work
as on /v1/chat/completions. previous_response_id continues one of the caller's own
responses: its conversation and its output are read back from the job record (another
consumer's response is not found). Instructions are not carried over from it, as OpenAI
does. Streamed, the answer is the Responses API's events, response.created to
response.completed (or response.incomplete when max_output_tokens ran out).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import Response

from contracts.chat import (
    NO_OPTIONS, ChatFormatError, ChatMessage, ChatOptions, ChatTools, ToolCall, canonical_json,
    decode_chat,
)
from contracts.reasoning import split_reasoning
from contracts.tool_calls import CallReader, ParsedCall, parse_tool_calls
from coordinator.errors import InvalidRequest, NotFound
from coordinator.gateway import tools as chat_tools
from coordinator.gateway.bridge import Bridge, JobEvents
from coordinator.gateway.completions import Answer, failure_error, run_completion
from coordinator.gateway.errors import body_for
from coordinator.gateway.render import ReasoningCounter, ended_well, finish_reason, job_usage
from coordinator.gateway.requests import (
    TEMPERATURE_DEFAULT, ResponsePlan, response_format_json, seed_for,
)
from coordinator.gateway.responses_schemas import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputText,
    JsonObjectFormat,
    JsonSchemaTextFormat,
    MessageItem,
    ResponsesRequest,
)
from coordinator.gateway.schemas import (
    ChatCompletionRequest, JsonSchemaFormat, ResponseFormatJsonObject, ResponseFormatJsonSchema,
)
from coordinator.jobs.stops import cut_at_stop
from coordinator.jobs.submission import Submission
from coordinator.model import JobRecord, TokenChunk
from coordinator.money.api_keys import Caller
from coordinator.service import CoordinatorService, JobView

RESPONSE_PREFIX = "resp_"
_STREAM = {"text/event-stream": {"schema": {"type": "string"}, "description":
           "with stream=true: the Responses API's events, response.created to response.completed"}}


def _text(content: str | list[InputText]) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content)


def _items_as_messages(items: list[MessageItem | FunctionCallItem | FunctionCallOutputItem]
                       ) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    for item in items:
        if isinstance(item, MessageItem):
            messages.append(ChatMessage(item.role, _text(item.content)))
        elif isinstance(item, FunctionCallItem):
            call = ToolCall(item.call_id, item.name, item.arguments)
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and not last.tool_call_id:
                messages[-1] = ChatMessage("assistant", last.content, (*last.tool_calls, call))
            else:
                messages.append(ChatMessage("assistant", "", (call,)))
        else:
            messages.append(ChatMessage("tool", item.output, (), item.call_id))
    return messages


def _previous(service: CoordinatorService, response_id: str, caller: Caller) -> list[ChatMessage]:
    """The conversation of one of the caller's responses, its answer included; no instructions."""
    if not response_id.startswith(RESPONSE_PREFIX):
        raise InvalidRequest("previous_response_id must be a response id (resp_...)",
                             param="previous_response_id")
    try:
        view = service.jobs.get(response_id[len(RESPONSE_PREFIX):], caller)
    except NotFound as error:
        raise NotFound(f"no response {response_id} of yours") from error
    if not ended_well(view.job):
        raise InvalidRequest(f"response {response_id} did not complete", param="previous_response_id")
    try:
        messages, tools = decode_chat(view.job.prompt)
    except ChatFormatError as error:
        raise InvalidRequest(f"{response_id} is not a chat", param="previous_response_id") from error
    text, _ = cut_at_stop(view.text, view.job.stop)
    calls: tuple[ToolCall, ...] = ()
    if chat_tools.reads_calls(tools) and (parsed := parse_tool_calls(text)).calls:
        text = parsed.content.strip()
        calls = tuple(ToolCall(chat_tools.call_id(view.job.job_id, index), c.name, c.arguments)
                      for index, c in enumerate(parsed.calls))
    return [m for m in messages if m.role != "system"] + [ChatMessage("assistant", text, calls)]


def _tools(body: ResponsesRequest) -> ChatTools:
    """The same checks and shape as chat's tools, through chat's own conversion."""
    choice = body.tool_choice
    as_chat = ChatCompletionRequest.model_validate({
        "model": body.model, "messages": [{"role": "user", "content": ""}],
        "tools": [{"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
                  for t in body.tools or ()] or None,
        "tool_choice": ({"type": "function", "function": {"name": choice.name}}
                        if choice is not None and not isinstance(choice, str) else choice),
        "parallel_tool_calls": body.parallel_tool_calls})
    return chat_tools.chat_tools(as_chat)


def _options(body: ResponsesRequest) -> ChatOptions:
    """text.format as chat's response_format (the same grammar on the node), and reasoning.effort
    as chat's reasoning_effort."""
    effort = body.reasoning.effort if body.reasoning else None
    kwargs = canonical_json({"reasoning_effort": effort}) if effort else ""
    text_format = body.text.format if body.text else None
    if isinstance(text_format, JsonObjectFormat):
        as_chat = ResponseFormatJsonObject(type="json_object")
    elif isinstance(text_format, JsonSchemaTextFormat):
        as_chat = ResponseFormatJsonSchema(type="json_schema", json_schema=JsonSchemaFormat(
            name=text_format.name, schema=text_format.schema_))
    else:
        return ChatOptions("", kwargs) if kwargs else NO_OPTIONS
    return ChatOptions(response_format_json(as_chat, "text.format.schema"), kwargs)


def responses_submission(service: CoordinatorService, body: ResponsesRequest, caller: Caller,
                         request_id: str = "") -> tuple[Submission, ResponsePlan]:
    messages = [ChatMessage("system", body.instructions)] if body.instructions else []
    if body.previous_response_id:
        messages += _previous(service, body.previous_response_id, caller)
    items = ([MessageItem(role="user", content=body.input)] if isinstance(body.input, str)
             else body.input)
    messages += _items_as_messages(items)
    tools = _tools(body)
    submission = Submission(
        consumer_id=caller.consumer_id, model_id=body.model, prompt="",
        max_tokens=body.max_output_tokens or 0,
        temperature=TEMPERATURE_DEFAULT if body.temperature is None else body.temperature,
        top_p=body.top_p or 1.0, seed=seed_for(None), request_id=request_id,
        min_decode_tokens_per_s=0.0, messages=tuple(messages),
        api_key_id=caller.key.key_id if caller.key else None, tools=tools, options=_options(body),
        option_fields=(("reasoning_effort", "reasoning.effort"),))
    plan = ResponsePlan("chat", body.model, bool(body.stream), True, False, 0, (),
                        chat_tools.reads_calls(tools))
    return submission, plan


# --- answers -----------------------------------------------------------------

def _message_item(job_id: str, text: str, status: str = "completed") -> dict:
    return {"type": "message", "id": f"msg_{job_id}", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []}


def _call_item(job_id: str, index: int, call: ParsedCall, status: str = "completed") -> dict:
    return {"type": "function_call", "id": f"fc_{job_id}_{index}",
            "call_id": chat_tools.call_id(job_id, index), "name": call.name,
            "arguments": call.arguments if status == "completed" else "", "status": status}


def _reasoning_item(job_id: str, text: str, status: str = "completed") -> dict:
    """A thinking model's reasoning, as its own output item before the answer."""
    return {"type": "reasoning", "id": f"rs_{job_id}", "summary": [], "status": status,
            "content": [{"type": "reasoning_text", "text": text}] if status == "completed" else []}


def _usage(job: JobRecord, streamed: int, reasoning_tokens: int = 0) -> dict:
    counts = job_usage(job, streamed)
    return {"input_tokens": counts["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": counts["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens": counts["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": counts["total_tokens"]}


def _response(body: ResponsesRequest, job: JobRecord, output: list[dict], status: str,
              usage: dict | None) -> dict:
    return {
        "id": RESPONSE_PREFIX + job.job_id, "object": "response", "created_at": job.created_at_ms // 1000,
        "status": status, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.instructions, "model": body.model, "output": output,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "temperature": body.temperature, "top_p": body.top_p,
        "max_output_tokens": body.max_output_tokens,
        "tool_choice": (body.tool_choice if isinstance(body.tool_choice, str) or body.tool_choice is None
                        else body.tool_choice.model_dump()) or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or ()],
        "previous_response_id": body.previous_response_id, "metadata": body.metadata or {},
        "text": {"format": {"type": "text"}}, "truncation": "disabled", "usage": usage,
        "store": body.store is not False}


def _status(job: JobRecord) -> str:
    return "completed" if finish_reason(job, False) == "stop" else "incomplete"


def whole_response(body: ResponsesRequest) -> Callable[[ResponsePlan, JobRecord, list[TokenChunk]], dict]:
    def whole(plan: ResponsePlan, job: JobRecord, chunks: list[TokenChunk]) -> dict:
        text = "".join(chunk.text for chunk in chunks)
        thinking = ReasoningCounter(plan.reasoning_inside) if plan.reasoning else None
        reasoning = ""
        if thinking is not None:
            for chunk in chunks:
                thinking.feed(chunk.text, len(chunk.token_ids))
            reasoning, text = split_reasoning(text, plan.reasoning_inside)
        calls = parse_tool_calls(text).calls if plan.tool_calls else ()
        shown = parse_tool_calls(text).content.strip() if calls else text
        output = [_reasoning_item(job.job_id, reasoning)] if reasoning else []
        output += [_message_item(job.job_id, shown)] if shown or not calls else []
        output += [_call_item(job.job_id, index, call) for index, call in enumerate(calls)]
        streamed = sum(len(chunk.token_ids) for chunk in chunks)
        usage = _usage(job, streamed, thinking.tokens if thinking else 0)
        return _response(body, job, output, _status(job), usage)
    return whole


class _Events:
    """The Responses API's events, numbered; output items as they come."""

    def __init__(self, job_id: str) -> None:
        self.job_id, self.number, self.output = job_id, 0, []  # type: list[dict]
        self._text: str | None = None  # the open message item's text
        self._reasoning: str | None = None  # the open reasoning item's text
        self.calls = 0

    def event(self, kind: str, **data: object) -> str:
        self.number += 1
        body = {"type": kind, "sequence_number": self.number - 1, **data}
        return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"

    def reasoning(self, text: str) -> str:
        if not text:
            return ""
        out, item_id = "", f"rs_{self.job_id}"
        if self._reasoning is None:
            self._reasoning = ""
            out += self.event("response.output_item.added", output_index=len(self.output),
                              item=_reasoning_item(self.job_id, "", "in_progress"))
        self._reasoning += text
        return out + self.event("response.reasoning_text.delta", item_id=item_id,
                                output_index=len(self.output), content_index=0, delta=text)

    def close_reasoning(self) -> str:
        if self._reasoning is None:
            return ""
        text, self._reasoning, index = self._reasoning, None, len(self.output)
        item = _reasoning_item(self.job_id, text)
        self.output.append(item)
        return (self.event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                           content_index=0, text=text)
                + self.event("response.output_item.done", output_index=index, item=item))

    def text(self, text: str) -> str:
        if not text:
            return ""
        out, item_id = self.close_reasoning(), f"msg_{self.job_id}"
        if self._text is None:
            self._text = ""
            out += self.event("response.output_item.added", output_index=len(self.output),
                              item=_message_item(self.job_id, "", "in_progress"))
            out += self.event("response.content_part.added", item_id=item_id,
                              output_index=len(self.output), content_index=0,
                              part={"type": "output_text", "text": "", "annotations": []})
        self._text += text
        return out + self.event("response.output_text.delta", item_id=item_id,
                                output_index=len(self.output), content_index=0, delta=text,
                                logprobs=[])

    def close_text(self) -> str:
        if self._text is None:
            return ""
        text, self._text, item_id, index = self._text, None, f"msg_{self.job_id}", len(self.output)
        item = _message_item(self.job_id, text)
        self.output.append(item)
        return (self.event("response.output_text.done", item_id=item_id, output_index=index,
                           content_index=0, text=text, logprobs=[])
                + self.event("response.content_part.done", item_id=item_id, output_index=index,
                             content_index=0, part=item["content"][0])
                + self.event("response.output_item.done", output_index=index, item=item))

    def call(self, call: ParsedCall) -> str:
        out = self.close_reasoning() + self.close_text()
        index = len(self.output)
        item = _call_item(self.job_id, self.calls, call)
        out += self.event("response.output_item.added", output_index=index,
                          item=_call_item(self.job_id, self.calls, call, "in_progress"))
        out += self.event("response.function_call_arguments.delta", item_id=item["id"],
                          output_index=index, delta=call.arguments)
        out += self.event("response.function_call_arguments.done", item_id=item["id"],
                          output_index=index, arguments=call.arguments, name=call.name)
        out += self.event("response.output_item.done", output_index=index, item=item)
        self.output.append(item)
        self.calls += 1
        return out


def stream_response(body: ResponsesRequest):  # type: ignore[no-untyped-def]
    async def stream(bridge: Bridge, plan: ResponsePlan, events: JobEvents, first: TokenChunk | JobView,
                     caller: Caller, created_s: int) -> AsyncIterator[str]:
        numbered, reader = _Events(events.job_id), CallReader()
        thinking = ReasoningCounter(plan.reasoning_inside) if plan.reasoning else None
        finished, streamed, item = False, 0, first

        def thought(text: str | None, token_count: int) -> str:
            """The reasoning's events; then shown() takes the answer's text."""
            if thinking is None:
                return shown(text)
            if text is None:
                reasoning, answer = thinking.finish()
                return numbered.reasoning(reasoning) + shown(answer) + shown(None)
            reasoning, answer = thinking.feed(text, token_count)
            return numbered.reasoning(reasoning) + shown(answer)

        def shown(text: str | None) -> str:
            if not plan.tool_calls:
                return numbered.text(text or "")
            before = len(reader.calls)
            out = numbered.text(reader.finish() if text is None else reader.feed(text))
            return out + "".join(numbered.call(c) for c in reader.calls[before:])

        try:
            start = {"id": RESPONSE_PREFIX + events.job_id, "object": "response",
                     "created_at": created_s, "status": "in_progress", "model": plan.model,
                     "output": [], "usage": None}
            yield numbered.event("response.created", response=start)
            yield numbered.event("response.in_progress", response=start)
            while isinstance(item, TokenChunk):
                streamed += len(item.token_ids)
                yield thought(item.text, len(item.token_ids))
                item = await events.next()
            finished = True
            job = item.job
            if not ended_well(job):
                await bridge.call(bridge.service.money.close_billing, events.job_id)
                error = body_for(failure_error(job))["error"]
                yield numbered.event("error", code=error["code"], message=error["message"],
                                     param=error["param"])
                return
            ending = thought(None, 0) + numbered.close_reasoning() + numbered.close_text()
            status = _status(job)
            final = _response(body, job, numbered.output, status,
                              _usage(job, streamed, thinking.tokens if thinking else 0))
            yield ending + numbered.event(f"response.{status}", response=final)
        finally:
            events.close()
            if not finished:
                bridge.cancel_soon(events.job_id, caller)
    return stream


def add_responses_route(app: FastAPI, bridge: Bridge, errors: dict,
                        key_text: Callable[..., Awaitable[str | None]]) -> None:
    """key_text: the app's reading of the bearer key (a FastAPI dependency)."""

    @app.post("/v1/responses", responses={200: {"content": _STREAM}, **errors},
              summary="Create a response (OpenAI's Responses API)")
    async def responses(body: ResponsesRequest, request: Request,
                        key: str | None = Depends(key_text),
                        idempotency_key: Annotated[str, Header(alias="idempotency-key",
                                                               max_length=128)] = "") -> Response:
        answer = Answer(whole_response(body), stream_response(body))
        return await run_completion(
            bridge, request, key,
            lambda who: responses_submission(bridge.service, body, who, idempotency_key), answer)
