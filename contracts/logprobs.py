"""Log-probabilities of generated tokens, as the node measured them.

Sent with each streamed token when a job asks for them (OpenAI's `logprobs` and
`top_logprobs`); natural logarithms, like OpenAI's.
"""

from __future__ import annotations

from dataclasses import dataclass

TOP_LOGPROBS_MAX = 20  # OpenAI's own ceiling


@dataclass(frozen=True)
class TopLogprob:
    token_id: int
    text: str
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """The chosen token's logprob and the `top` most likely alternatives at that step."""

    logprob: float
    top: tuple[TopLogprob, ...] = ()
    text: str = ""  # the chosen token's text as streamed

    def __post_init__(self) -> None:
        assert len(self.top) <= TOP_LOGPROBS_MAX


def logprobs_to_json(logprobs: tuple[TokenLogprob, ...]) -> list:
    return [[entry.logprob, [[t.token_id, t.text, t.logprob] for t in entry.top], entry.text]
            for entry in logprobs]


def logprobs_from_json(data: list) -> tuple[TokenLogprob, ...]:
    return tuple(TokenLogprob(float(logprob), tuple(TopLogprob(int(i), str(s), float(p))
                                                    for i, s, p in top), str(text))
                 for logprob, top, text in data)
