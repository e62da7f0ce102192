"""A chat job's output read as an answer: content, a thinking model's reasoning, and tool calls.
Pure; the gRPC edge's reading of what the HTTP gateway streams (coordinator/gateway/render.py).

Everything is read from the job's own prompt text (its tools and template options) and the
model's chat features, so the answer follows from what the receipt covers.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.chat import ChatFormatError, decode_chat_all
from contracts.models import CHAT_FEATURE_THINKING
from contracts.reasoning import split_reasoning, starts_inside
from contracts.tool_calls import ParsedCall, parse_tool_calls


@dataclass(frozen=True)
class ChatAnswer:
    content: str
    reasoning: str
    calls: tuple[ParsedCall, ...]


def call_id(job_id: str, index: int) -> str:
    """A call's id: the job's, and the call's place in the answer."""
    return f"call_{job_id}_{index}"


def chat_answer(prompt: str, text: str, features: tuple[str, ...]) -> ChatAnswer | None:
    """The answer of a chat job's output text; None for a plain-text job."""
    try:
        _, tools, options = decode_chat_all(prompt)
    except ChatFormatError:
        return None
    reasoning = ""
    if CHAT_FEATURE_THINKING in features:
        inside = starts_inside(features, options.kwargs().get("enable_thinking"))
        reasoning, text = split_reasoning(text, inside)
    if tools.definitions and tools.choice != "none":
        parsed = parse_tool_calls(text)
        return ChatAnswer(parsed.content.strip() if parsed.calls else parsed.content, reasoning,
                          parsed.calls)
    return ChatAnswer(text, reasoning, ())
