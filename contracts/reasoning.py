"""A thinking model's reasoning, told apart from its answer in the output text. Pure.

Models that think write their reasoning in a `<think>...</think>` block before the
answer. Some templates open the block in the generation prompt (so the output starts
inside it and only `</think>` appears); others leave the model to write `<think>`
itself. The node reads which from the model's template (node_agent/chat_templates.py)
and publishes it as chat features; `starts_inside` turns them and the request's
enable_thinking into the reader's starting state.

The receipt covers the raw output tokens, tags and all: the split is only how the
gateway shows them.
"""

from __future__ import annotations

from contracts.models import CHAT_FEATURE_THINKS_BY_DEFAULT, CHAT_FEATURE_THINKS_WHEN_ENABLED

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")  # as OpenAI


def starts_inside(features: tuple[str, ...], enable_thinking: bool | None) -> bool:
    """Whether a job's output begins inside a reasoning block its prompt opened."""
    if enable_thinking is None:
        return CHAT_FEATURE_THINKS_BY_DEFAULT in features
    return enable_thinking and CHAT_FEATURE_THINKS_WHEN_ENABLED in features


def _held_prefix(text: str, marker: str) -> int:
    """How many characters at the end of text could begin marker."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class ReasoningReader:
    """Splits streamed output into reasoning and answer; feed() returns what is certain.

    Outside a block, only an output that starts with `<think>` (after white space) enters
    one: a tag later in the answer is the answer's text.
    """

    def __init__(self, inside: bool) -> None:
        self.inside = inside
        self._undecided = not inside  # the output may still open with <think>
        self._pending = ""
        self._after_close = False  # white space right after </think> is not the answer's

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning, answer) certain after this text."""
        self._pending += text
        reasoning = answer = ""
        if self._undecided:
            stripped = self._pending.lstrip()
            if not stripped or (THINK_OPEN.startswith(stripped) and stripped != THINK_OPEN):
                return "", ""  # still could be the opening tag
            self._undecided = False
            if stripped.startswith(THINK_OPEN):
                self.inside, self._pending = True, stripped[len(THINK_OPEN):]
        if self.inside:
            end = self._pending.find(THINK_CLOSE)
            if end < 0:
                keep = _held_prefix(self._pending, THINK_CLOSE)
                reasoning = self._pending[:len(self._pending) - keep]
                self._pending = self._pending[len(self._pending) - keep:]
                return reasoning, ""
            reasoning, self._pending = self._pending[:end], self._pending[end + len(THINK_CLOSE):]
            self.inside, self._after_close = False, True
        if self._after_close:
            self._pending = self._pending.lstrip()
            if not self._pending:
                return reasoning, ""
            self._after_close = False
        answer, self._pending = self._pending, ""
        return reasoning, answer

    def finish(self) -> tuple[str, str]:
        """What was held back, once the output has ended."""
        rest, self._pending = self._pending, ""
        if self.inside:
            return rest, ""
        return "", "" if self._after_close else rest


def split_reasoning(text: str, inside: bool) -> tuple[str, str]:
    """(reasoning, answer) of a whole output."""
    reader = ReasoningReader(inside)
    reasoning, answer = reader.feed(text)
    more_reasoning, more_answer = reader.finish()
    return reasoning + more_reasoning, answer + more_answer
