"""OpenAI's Responses API request body (POST /v1/responses): the subset agents use.

Input items: messages (text content), function_call and function_call_output items.
`reasoning.effort` goes to the model's chat template (a 400 naming it when the template
does not read it). Undeclared fields are refused with a 400 naming them (built-in tools,
reasoning summaries, include, background, truncation, conversation, prompt templates...); user, metadata,
store, safety_identifier and prompt_cache_key are hints.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag

from contracts.chat import MESSAGES_MAX, TOOLS_MAX
from contracts.reasoning import REASONING_EFFORTS
from coordinator.gateway.fields import HINT_DESCRIPTION
from coordinator.gateway.schemas import (
    HINT_CHARS_MAX,
    MAX_TOKENS_MAX,
    MODEL_CHARS_MAX,
    SCHEMA_NAME_PATTERN,
    TOOL_CALL_ID_CHARS_MAX,
    FunctionName,
    Hint,
    JsonSchemaSubset,
    Metadata,
    _Request,
    format_tag,
)

CallId = Annotated[str, Field(min_length=1, max_length=TOOL_CALL_ID_CHARS_MAX)]


class InputText(_Request):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[dict] | None = Field(default=None, description=HINT_DESCRIPTION)


class MessageItem(_Request):
    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[InputText]
    id: str | None = Field(default=None, max_length=TOOL_CALL_ID_CHARS_MAX)
    status: Literal["completed", "incomplete", "in_progress"] | None = None


class FunctionCallItem(_Request):
    type: Literal["function_call"]
    call_id: CallId
    name: FunctionName
    arguments: str
    id: str | None = Field(default=None, max_length=TOOL_CALL_ID_CHARS_MAX)
    status: Literal["completed", "incomplete", "in_progress"] | None = None


class FunctionCallOutputItem(_Request):
    type: Literal["function_call_output"]
    call_id: CallId
    output: str
    id: str | None = Field(default=None, max_length=TOOL_CALL_ID_CHARS_MAX)
    status: Literal["completed", "incomplete", "in_progress"] | None = None


InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem


class FunctionTool(_Request):
    type: Literal["function"]
    name: FunctionName
    description: str | None = None
    parameters: dict | None = None
    strict: Literal[False] | None = Field(default=None, description="strict true is refused")


class NamedFunctionChoice(_Request):
    type: Literal["function"]
    name: FunctionName


class TextFormat(_Request):
    type: Literal["text"]


class JsonObjectFormat(_Request):
    type: Literal["json_object"]


class JsonSchemaTextFormat(_Request):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    type: Literal["json_schema"]
    name: str = Field(pattern=SCHEMA_NAME_PATTERN)
    description: str | None = Field(default=None, max_length=HINT_CHARS_MAX)
    schema_: JsonSchemaSubset = Field(alias="schema", description="decoded under its grammar on the node, as "
                          "chat's response_format json_schema (the same features are supported)")
    strict: bool | None = None


class ReasoningOptions(_Request):
    effort: Literal[REASONING_EFFORTS] | None = Field(  # type: ignore[valid-type]
        default=None, description="passed to the model's chat template as reasoning_effort")
    summary: None = Field(default=None, description="reasoning summaries are not offered: the "
                          "reasoning item carries the reasoning itself")


class TextOptions(_Request):
    format: Annotated[Annotated[TextFormat, Tag("type=text")]
                      | Annotated[JsonObjectFormat, Tag("type=json_object")]
                      | Annotated[JsonSchemaTextFormat, Tag("type=json_schema")],
                      Discriminator(format_tag)] | None = None


class ResponsesRequest(_Request):
    model: str = Field(min_length=1, max_length=MODEL_CHARS_MAX)
    input: str | Annotated[list[InputItem], Field(min_length=1, max_length=MESSAGES_MAX)]
    instructions: str | None = None
    tools: list[FunctionTool] | None = Field(default=None, max_length=TOOLS_MAX)
    tool_choice: Literal["auto", "none", "required"] | NamedFunctionChoice | None = Field(
        default=None, description="a named function must be one of the tools")
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_MAX)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stream: bool | None = False
    previous_response_id: str | None = Field(default=None, max_length=TOOL_CALL_ID_CHARS_MAX,
                                             pattern="^resp_",
                                             description="one of your own earlier responses")
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    user: Hint = None
    metadata: Metadata = None
    store: bool | None = Field(default=None, description=HINT_DESCRIPTION + " (responses are "
                               "kept as job records; previous_response_id works either way)")
    safety_identifier: Hint = None
    prompt_cache_key: Hint = None
