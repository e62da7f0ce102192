"""HTTP request bodies in, coordinator submissions and response plans out."""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from typing import Literal

from contracts.chat import NO_OPTIONS, ChatMessage, ChatOptions, canonical_json
from contracts.models import CHAT_FEATURE_THINKING
from contracts.reasoning import starts_inside
from contracts.structured_output import (
    FORMAT_JSON_OBJECT,
    FORMAT_JSON_SCHEMA,
    canonical_format,
    schema_problem,
)
from coordinator.errors import InvalidRequest
from coordinator.gateway import tools as tool_calls
from coordinator.gateway.schemas import (
    ChatCompletionRequest,
    ChatMessageIn,
    CompletionRequest,
    ResponseFormat,
    ResponseFormatJsonObject,
    ResponseFormatJsonSchema,
    Stop,
)
from coordinator.jobs.submission import SEED_MAX, Submission
from coordinator.money.api_keys import Caller
from coordinator.model import DELIVERY_STREAM, DELIVERY_WHOLE

# OpenAI's defaults for sampling when a request leaves them out.
TEMPERATURE_DEFAULT = 1.0


@dataclass(frozen=True)
class ResponsePlan:
    """How to answer: chat or text shapes, streamed or not, and what to include."""

    kind: Literal["chat", "text"]
    model: str
    stream: bool
    include_usage: bool
    logprobs: bool
    top_logprobs: int
    stop: tuple[str, ...]
    tool_calls: bool = False  # read the output for tool calls
    enable_thinking: bool | None = None  # as the request set it for the template
    reasoning: bool = False  # the model thinks: its reasoning is shown apart (with_features)
    reasoning_inside: bool = False  # and its output starts inside the reasoning block

    def with_features(self, features: tuple[str, ...]) -> ResponsePlan:
        """The plan once the model's chat features are known (after the submit checked it)."""
        if self.kind != "chat" or CHAT_FEATURE_THINKING not in features:
            return self
        return dataclasses.replace(self, reasoning=True,
                                   reasoning_inside=starts_inside(features, self.enable_thinking))


def _stops(stop: Stop) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)


def _content(message: ChatMessageIn) -> str:
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    return "".join(part.text for part in message.content)


def response_format_json(response_format: ResponseFormat | None, param: str) -> str:
    """The format a chat prompt carries ("" for free text); a schema feature the node cannot
    decode under is refused, named."""
    if isinstance(response_format, ResponseFormatJsonObject):
        return canonical_json(canonical_format(FORMAT_JSON_OBJECT))
    if isinstance(response_format, ResponseFormatJsonSchema):
        schema = response_format.json_schema.schema_.as_json()
        problem = schema_problem(schema)
        if problem:
            raise InvalidRequest(f"{param} cannot be used: {problem}", param=param)
        return canonical_json(canonical_format(FORMAT_JSON_SCHEMA, schema))
    return ""


def _template_kwargs(body: ChatCompletionRequest) -> dict:
    kwargs = body.chat_template_kwargs.model_dump(exclude_none=True) if body.chat_template_kwargs else {}
    if body.reasoning_effort is not None:  # the top-level field wins, as published
        kwargs["reasoning_effort"] = body.reasoning_effort
    return kwargs


def chat_options(body: ChatCompletionRequest) -> ChatOptions:
    kwargs = _template_kwargs(body)
    options = ChatOptions(response_format_json(body.response_format, "response_format.json_schema.schema"),
                          canonical_json(kwargs) if kwargs else "")
    return options if options != ChatOptions() else NO_OPTIONS


def seed_for(seed: int | None) -> int:
    """A fresh seed when none is asked for, so repeated requests sample differently."""
    return secrets.randbelow(SEED_MAX + 1) if seed is None else seed


def _delivery(stream: bool | None) -> str:
    """A non-streaming answer shows the consumer nothing unless the job ends well."""
    return DELIVERY_STREAM if stream else DELIVERY_WHOLE


def chat_submission(body: ChatCompletionRequest, caller: Caller,
                    request_id: str = "") -> tuple[Submission, ResponsePlan]:
    if body.top_logprobs is not None and not body.logprobs:
        raise InvalidRequest("top_logprobs needs logprobs set to true", param="top_logprobs")
    top_logprobs = (body.top_logprobs or 0) if body.logprobs else -1
    tools = tool_calls.chat_tools(body)
    messages = tuple(ChatMessage(m.role, _content(m), tool_calls.message_tool_calls(m),
                                 m.tool_call_id or "") for m in body.messages)
    stops = _stops(body.stop)
    submission = Submission(
        consumer_id=caller.consumer_id, model_id=body.model, prompt="",
        max_tokens=body.max_completion_tokens or body.max_tokens or 0,
        temperature=TEMPERATURE_DEFAULT if body.temperature is None else body.temperature,
        top_p=body.top_p or 1.0, seed=seed_for(body.seed), request_id=request_id,
        min_decode_tokens_per_s=0.0, messages=messages, stop=stops, top_logprobs=top_logprobs,
        api_key_id=caller.key.key_id if caller.key else None, tools=tools,
        delivery=_delivery(body.stream), options=chat_options(body))
    thinking = body.chat_template_kwargs.enable_thinking if body.chat_template_kwargs else None
    plan = ResponsePlan("chat", body.model, bool(body.stream),
                        bool(body.stream_options and body.stream_options.include_usage),
                        top_logprobs >= 0, max(0, top_logprobs), stops,
                        tool_calls.reads_calls(tools), thinking)
    return submission, plan


def completion_submission(body: CompletionRequest, caller: Caller,
                          request_id: str = "") -> tuple[Submission, ResponsePlan]:
    if isinstance(body.prompt, list):
        if len(body.prompt) != 1:
            raise InvalidRequest("prompt must be one string (a list of several prompts is not "
                                 "supported; send one request per prompt)", param="prompt")
        prompt = body.prompt[0]
    else:
        prompt = body.prompt
    if body.echo:
        raise InvalidRequest("echo is not supported", param="echo")
    if body.suffix:
        raise InvalidRequest("suffix is not supported", param="suffix")
    top_logprobs = -1 if body.logprobs is None else body.logprobs
    stops = _stops(body.stop)
    submission = Submission(
        consumer_id=caller.consumer_id, model_id=body.model, prompt=prompt,
        max_tokens=body.max_tokens or 0,
        temperature=TEMPERATURE_DEFAULT if body.temperature is None else body.temperature,
        top_p=body.top_p or 1.0, seed=seed_for(body.seed), request_id=request_id,
        min_decode_tokens_per_s=0.0, stop=stops, top_logprobs=top_logprobs,
        api_key_id=caller.key.key_id if caller.key else None, delivery=_delivery(body.stream))
    plan = ResponsePlan("text", body.model, bool(body.stream),
                        bool(body.stream_options and body.stream_options.include_usage),
                        top_logprobs >= 0, max(0, top_logprobs), stops)
    return submission, plan
