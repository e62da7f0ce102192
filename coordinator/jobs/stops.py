"""Stop sequences over streamed text: pure, so the cut is the same however text arrives.

Both consumer edges (the HTTP gateway and the gRPC JobService) cut the text before
the first stop sequence, as OpenAI does, never show a prefix of a stop sequence
until they know it does not follow, and end the job there.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def cut_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """The text before the first stop sequence, and whether one was found."""
    positions = [found for stop in stops if (found := text.find(stop)) >= 0]
    return (text[:min(positions)], True) if positions else (text, False)


def _held_back(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing characters could still begin a stop sequence."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


@dataclass
class StopScanner:
    """Feed streamed text in; get out the text safe to show, and whether a stop was hit."""

    stops: tuple[str, ...]
    _pending: str = ""
    _shown: int = field(default=0)  # characters of the output already shown
    stopped: bool = False

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        self._pending += text
        return self._release(final=False)

    def flush(self) -> str:
        """The held-back text, once the output is complete (cut if it holds a stop)."""
        return "" if self.stopped else self._release(final=True)

    def _release(self, final: bool) -> str:
        before, hit = cut_at_stop(self._pending, self.stops)
        # A stop still unfinished at the end may begin before the one found: wait for it.
        undecided_from = len(self._pending) if final else \
            len(self._pending) - _held_back(self._pending, self.stops)
        if hit and len(before) <= undecided_from:
            self.stopped = True
            self._pending = ""
            self._shown += len(before)
            return before
        ready, self._pending = self._pending[:undecided_from], self._pending[undecided_from:]
        self._shown += len(ready)
        return ready

    @property
    def shown_chars(self) -> int:
        return self._shown
