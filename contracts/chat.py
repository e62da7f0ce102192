"""Chat messages and their canonical text, shared by the coordinator and the node.

A chat job stores its messages as one canonical prompt text (the encoding below),
so the receipt's prompt digest, sha256 over the job's prompt text, covers exactly
the messages the node rendered with the model's chat template:

    {"messages":[{"content":"...","role":"user"},...],"v":1}

JSON with sorted keys, no spaces, non-ASCII kept as UTF-8. The coordinator refuses
plain-text prompts in this form, so the text alone tells a node (and a verifier)
to render it through the chat template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

CHAT_PROMPT_VERSION = 1
ROLES = ("system", "user", "assistant", "developer", "tool")
MESSAGES_MAX = 256


class ChatFormatError(ValueError):
    """The text is not a canonical chat prompt."""


@dataclass(frozen=True)
class ChatMessage:
    role: str  # one of ROLES; checked where requests are validated
    content: str


def encode_chat_prompt(messages: tuple[ChatMessage, ...]) -> str:
    assert 0 < len(messages) <= MESSAGES_MAX
    body = {"messages": [{"content": m.content, "role": m.role} for m in messages],
            "v": CHAT_PROMPT_VERSION}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
    try:
        body = json.loads(text)
        if body.get("v") != CHAT_PROMPT_VERSION:
            raise ChatFormatError(f"unsupported chat prompt version {body.get('v')!r}")
        messages = tuple(ChatMessage(m["role"], m["content"]) for m in body["messages"])
        if not all(isinstance(m.content, str) and m.role in ROLES for m in messages):
            raise ChatFormatError("chat messages need a known role and text content")
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError) as error:
        raise ChatFormatError(f"not a canonical chat prompt: {error}") from error
    if not messages or encode_chat_prompt(messages) != text:
        raise ChatFormatError("chat prompt is not in canonical form")
    return messages
