"""Anthropic's Messages API bodies (POST /v1/messages), as far as the gateway honours them.

As for the OpenAI routes, a field not declared here is refused with a 400 naming it:
images and documents, server tools, `thinking`, `top_k`, `service_tier`, `container`,
`mcp_servers`. `metadata.user_id` is a hint.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.chat import MESSAGES_MAX, TOOLS_MAX
from coordinator.gateway.fields import HINT_DESCRIPTION
from coordinator.gateway.schemas import (
    FUNCTION_NAME_PATTERN,
    HINT_CHARS_MAX,
    MAX_TOKENS_MAX,
    MODEL_CHARS_MAX,
    TOOL_CALL_ID_CHARS_MAX,
    StopText,
)
from coordinator.jobs.submission import STOP_SEQUENCES_MAX


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


ToolName = Annotated[str, Field(pattern=FUNCTION_NAME_PATTERN)]
ToolUseId = Annotated[str, Field(min_length=1, max_length=TOOL_CALL_ID_CHARS_MAX)]


class CacheControl(_Request):
    type: Literal["ephemeral"]
    ttl: str | None = None


class TextBlock(_Request):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = Field(default=None, description=HINT_DESCRIPTION)


class ToolUseBlock(_Request):
    type: Literal["tool_use"]
    id: ToolUseId
    name: ToolName
    input: dict
    cache_control: CacheControl | None = Field(default=None, description=HINT_DESCRIPTION)


class ToolResultBlock(_Request):
    type: Literal["tool_result"]
    tool_use_id: ToolUseId
    content: str | list[TextBlock] = ""
    is_error: bool | None = None
    cache_control: CacheControl | None = Field(default=None, description=HINT_DESCRIPTION)


UserBlock = Annotated[TextBlock | ToolResultBlock, Field(discriminator="type")]
AssistantBlock = Annotated[TextBlock | ToolUseBlock, Field(discriminator="type")]


class UserMessage(_Request):
    role: Literal["user"]
    content: str | list[UserBlock] = Field(description="text and tool_result blocks")


class AssistantMessage(_Request):
    role: Literal["assistant"]
    content: str | list[AssistantBlock] = Field(description="text and tool_use blocks")


MessageIn = Annotated[UserMessage | AssistantMessage, Field(discriminator="role")]


class ToolIn(_Request):
    name: ToolName
    description: str | None = None
    input_schema: dict = Field(description="a JSON schema of the tool's input")
    type: Literal["custom"] | None = Field(default=None, description="server tools are refused")
    cache_control: CacheControl | None = Field(default=None, description=HINT_DESCRIPTION)


class ToolChoiceIn(_Request):
    type: Literal["auto", "any", "tool", "none"]
    name: ToolName | None = Field(default=None, description="with type tool: the tool to call")
    disable_parallel_tool_use: bool | None = None


class MetadataIn(_Request):
    user_id: str | None = Field(default=None, max_length=HINT_CHARS_MAX, description=HINT_DESCRIPTION)


class MessagesRequest(_Request):
    model: str = Field(min_length=1, max_length=MODEL_CHARS_MAX)
    messages: list[MessageIn] = Field(min_length=1, max_length=MESSAGES_MAX)
    max_tokens: int = Field(ge=1, le=MAX_TOKENS_MAX)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[StopText] | None = Field(default=None, max_length=STOP_SEQUENCES_MAX)
    stream: bool | None = False
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    tools: list[ToolIn] | None = Field(default=None, max_length=TOOLS_MAX)
    tool_choice: ToolChoiceIn | None = None
    metadata: MetadataIn | None = None
    cache_control: CacheControl | None = Field(default=None, description=HINT_DESCRIPTION)


# --- responses (documented for clients; the route answers them as JSON) -----

class UsageOut(BaseModel):
    input_tokens: int
    output_tokens: int


class ContentOut(BaseModel):
    type: Literal["text", "tool_use"]
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict | None = None


class MessageOut(BaseModel):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[ContentOut]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]
    stop_sequence: str | None
    usage: UsageOut


class AnthropicErrorBody(BaseModel):
    type: str
    message: str


class AnthropicError(BaseModel):
    type: Literal["error"]
    error: AnthropicErrorBody
