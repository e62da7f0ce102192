"""Chat messages and their canonical text, shared by the coordinator and the node.

A chat job stores its messages as one canonical prompt text (the encoding below),
so the receipt's prompt digest, sha256 over the job's prompt text, covers exactly
the messages the node rendered with the model's chat template:

    {"messages":[{"content":"...","role":"user"},...],"v":1}

JSON with sorted keys, no spaces, non-ASCII kept as UTF-8. The coordinator refuses
plain-text prompts in this form, so the text alone tells a node (and a verifier)
to render it through the chat template.

A chat with tools is version 2: the tool definitions (OpenAI's function objects),
the tool choice, assistant messages' tool calls and tool messages' call ids are in
the text too, only where present, so a version 1 text never changes:

    {"messages":[...,{"content":"","role":"assistant","tool_calls":[{"arguments":"{..}",
     "id":"call_1","name":"f"}]},{"content":"..","role":"tool","tool_call_id":"call_1"}],
     "parallel_tool_calls":true,"tool_choice":"auto","tools":[{...}],"v":2}

The node renders all of it with the model's chat template, and derives from the tool
choice the constraint it decodes under (contracts/tool_calls.py); a verifier reads
the same text and applies the same constraint.

A chat that asks for structured output or passes the template options is version 3:
the tool fields as in version 2, plus, only where present, the response format
(contracts/structured_output.py) and the template's keyword arguments:

    {"messages":[...],"parallel_tool_calls":true,"response_format":{"type":"json_object"},
     "template_kwargs":{"enable_thinking":true},"tool_choice":"auto","tools":[],"v":3}
"""

from __future__ import annotations

import json
from dataclasses import dataclass

CHAT_PROMPT_VERSION = 1
CHAT_TOOLS_VERSION = 2
CHAT_OPTIONS_VERSION = 3
ROLES = ("system", "user", "assistant", "developer", "tool")
MESSAGES_MAX = 256
TOOLS_MAX = 128
TOOL_CHOICES = ("auto", "none", "required")  # or a function's name: "function:NAME"
FUNCTION_CHOICE = "function:"


class ChatFormatError(ValueError):
    """The text is not a canonical chat prompt."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it or the client sent it back


@dataclass(frozen=True)
class ChatMessage:
    role: str  # one of ROLES; checked where requests are validated
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's calls
    tool_call_id: str = ""  # a tool message: the call it answers


@dataclass(frozen=True)
class ChatTools:
    """The tools a chat offers the model, and how it may use them."""

    definitions: tuple[str, ...] = ()  # each tool (OpenAI's {"type":"function",...}) as canonical JSON
    choice: str = "auto"  # one of TOOL_CHOICES, or FUNCTION_CHOICE + a function's name
    parallel: bool = True

    def names(self) -> tuple[str, ...]:
        return tuple(json.loads(d).get("function", {}).get("name", "") for d in self.definitions)


NO_TOOLS = ChatTools()


@dataclass(frozen=True)
class ChatOptions:
    """How the answer is shaped: its format, and the keyword arguments its template takes."""

    response_format: str = ""  # canonical JSON ({"type": "json_object"} ...), "" for free text
    template_kwargs: str = ""  # canonical JSON object ({"enable_thinking": true}), "" for none

    def format(self) -> dict | None:
        return json.loads(self.response_format) if self.response_format else None

    def kwargs(self) -> dict:
        return json.loads(self.template_kwargs) if self.template_kwargs else {}


NO_OPTIONS = ChatOptions()


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _message_json(message: ChatMessage) -> dict:
    body: dict = {"content": message.content, "role": message.role}
    if message.tool_calls:
        body["tool_calls"] = [{"arguments": c.arguments, "id": c.id, "name": c.name}
                              for c in message.tool_calls]
    if message.tool_call_id:
        body["tool_call_id"] = message.tool_call_id
    return body


def _uses_tools(messages: tuple[ChatMessage, ...], tools: ChatTools) -> bool:
    return tools != NO_TOOLS or any(m.tool_calls or m.tool_call_id for m in messages)


def encode_chat_prompt(messages: tuple[ChatMessage, ...], tools: ChatTools = NO_TOOLS,
                       options: ChatOptions = NO_OPTIONS) -> str:
    assert 0 < len(messages) <= MESSAGES_MAX and len(tools.definitions) <= TOOLS_MAX
    body: dict = {"messages": [_message_json(m) for m in messages], "v": CHAT_PROMPT_VERSION}
    if _uses_tools(messages, tools) or options != NO_OPTIONS:
        body.update(v=CHAT_TOOLS_VERSION, tool_choice=tools.choice,
                    parallel_tool_calls=tools.parallel,
                    tools=[json.loads(d) for d in tools.definitions])
    if options != NO_OPTIONS:
        body["v"] = CHAT_OPTIONS_VERSION
        if options.response_format:
            body["response_format"] = json.loads(options.response_format)
        if options.template_kwargs:
            body["template_kwargs"] = json.loads(options.template_kwargs)
    return canonical_json(body)


def is_chat_prompt(text: str) -> bool:
    """Whether the text is a canonical chat prompt (a plain-text prompt never may be one)."""
    if not text.startswith('{"messages":'):
        return False
    try:
        decode_chat_prompt(text)
    except ChatFormatError:
        return False
    return True


def decode_chat_prompt(text: str) -> tuple[ChatMessage, ...]:
    """The messages of a canonical chat prompt; refuses any other text."""
    return decode_chat(text)[0]


def decode_chat_options(text: str) -> ChatOptions:
    """The answer's format and template options of a canonical chat prompt."""
    return decode_chat_all(text)[2]


def _message(body: dict) -> ChatMessage:
    calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in body.get("tool_calls", ()))
    message = ChatMessage(body["role"], body["content"], calls, body.get("tool_call_id", ""))
    fields = (message.content, message.tool_call_id, *(v for c in calls for v in vars(c).values()))
    if not all(isinstance(v, str) for v in fields) or message.role not in ROLES:
        raise ChatFormatError("chat messages need a known role and text content")
    return message


def _options(body: dict) -> ChatOptions:
    response_format, kwargs = body.get("response_format"), body.get("template_kwargs")
    if not isinstance(response_format, (dict, type(None))) or not isinstance(kwargs, (dict, type(None))):
        raise ChatFormatError("response_format and template_kwargs must be objects")
    return ChatOptions(canonical_json(response_format) if response_format else "",
                       canonical_json(kwargs) if kwargs else "")


def decode_chat(text: str) -> tuple[tuple[ChatMessage, ...], ChatTools]:
    """The messages and tools of a canonical chat prompt; refuses any other text."""
    return decode_chat_all(text)[:2]  # type: ignore[return-value]


def decode_chat_all(text: str) -> tuple[tuple[ChatMessage, ...], ChatTools, ChatOptions]:
    """The messages, tools and options of a canonical chat prompt; refuses any other text."""
    try:
        body = json.loads(text)
        if body.get("v") not in (CHAT_PROMPT_VERSION, CHAT_TOOLS_VERSION, CHAT_OPTIONS_VERSION):
            raise ChatFormatError(f"unsupported chat prompt version {body.get('v')!r}")
        messages = tuple(_message(m) for m in body["messages"])
        tools, options = NO_TOOLS, NO_OPTIONS
        if body["v"] in (CHAT_TOOLS_VERSION, CHAT_OPTIONS_VERSION):
            tools = ChatTools(tuple(canonical_json(t) for t in body["tools"]),
                              body["tool_choice"], body["parallel_tool_calls"])
        if body["v"] == CHAT_OPTIONS_VERSION:
            options = _options(body)
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError) as error:
        raise ChatFormatError(f"not a canonical chat prompt: {error}") from error
    if not messages or len(messages) > MESSAGES_MAX or len(tools.definitions) > TOOLS_MAX:
        raise ChatFormatError("chat prompt has no messages, or too many messages or tools")
    if encode_chat_prompt(messages, tools, options) != text:
        raise ChatFormatError("chat prompt is not in canonical form")
    return messages, tools, options
