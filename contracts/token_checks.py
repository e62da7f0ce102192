"""Was each output token what the seeded sampler picks from the replayed logits? Pure.

Shared by the coordinator's verifier and by nodes that check their peers' jobs
(coordinator.verification.tokens re-exports it).

Replayed logits differ from the node's by floating-point noise, so each check
allows a little slack: a greedy token may trail the best logit by `logit_slack`,
and a sampled token must win the Gumbel race against every token that is surely
in the nucleus, by the same slack scaled by the temperature. Nothing else passes:
another model, prompt or seed picks other tokens within a few steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from contracts.receipts import FinishReason
from contracts.sampling import gumbel_noise, probabilities, sample_token

NO_TOKEN = -1


class Tolerances(Protocol):
    """The slack a token check allows (coordinator.verification.tolerances.Tolerances has it)."""

    @property
    def logit_slack(self) -> float:  # greedy: the output token's logit may trail the best by this
        ...

    @property
    def mass_slack(self) -> float:  # top_p: probability mass slack at the nucleus boundary
        ...


@dataclass(frozen=True)
class TokenSlack:
    """The slack a checking node is told to allow (the coordinator's tolerances, on the wire)."""

    logit_slack: float
    mass_slack: float

    def __post_init__(self) -> None:
        assert self.logit_slack >= 0 and self.mass_slack >= 0


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_p: float
    seed: int


@dataclass(frozen=True)
class TokenCheck:
    step: int
    claimed: int  # the output token at this step, or NO_TOKEN for the step after the output
    ok: bool
    preferred: int  # what the replay would pick (its best token)
    problem: str = ""


def _nucleus_bounds(probs: np.ndarray, top_p: float, slack: float) -> tuple[np.ndarray, np.ndarray]:
    """(may be in the nucleus, surely in it) masks, allowing `slack` of noise in each probability."""
    if top_p >= 1.0:
        everything = np.ones(probs.size, dtype=bool)
        return everything, everything
    ascending = np.sort(probs)
    tail = np.concatenate(([0.0], np.cumsum(ascending[::-1])))  # tail[n]: mass of the n likeliest
    above_surely = tail[probs.size - np.searchsorted(ascending, probs + slack, side="right")]
    above_maybe = tail[probs.size - np.searchsorted(ascending, probs - slack, side="left")] - probs
    return above_surely < top_p + slack, above_maybe < top_p - slack


def token_is_plausible(logits: np.ndarray, token: int, step: int, sampling: Sampling,
                       tolerances: Tolerances) -> tuple[bool, int]:
    """(the sampler could have picked `token` here, the replay's own pick).

    The replay's own pick is computed only when the token fails (it is evidence), so
    an honest token costs one softmax and the noise of the tokens surely in the nucleus.
    """
    if not 0 <= token < logits.size:
        return False, int(np.argmax(logits))
    if sampling.temperature == 0.0:
        best = int(np.argmax(logits))
        return bool(logits[token] >= logits[best] - tolerances.logit_slack), best
    own_pick = lambda: sample_token(logits, sampling.temperature, sampling.top_p,  # noqa: E731
                                    sampling.seed, step)
    probs = probabilities(logits, sampling.temperature)
    maybe, surely = _nucleus_bounds(probs, sampling.top_p, tolerances.mass_slack)
    if not maybe[token]:
        return False, own_pick()
    rivals = np.flatnonzero(surely)
    if rivals.size == 0:
        return True, token
    scale = 1.0 / sampling.temperature
    racers = np.append(rivals, token)  # one draw of noise for the rivals and the claimed token
    scores = logits[racers].astype(np.float64) * scale + gumbel_noise(sampling.seed, step, racers)
    if scores[-1] >= float(scores[:-1].max()) - tolerances.logit_slack * scale:
        return True, token
    return False, own_pick()


def make_token_check(output_ids: tuple[int, ...], finish_reason: FinishReason, sampling: Sampling,
                     end_token_ids: frozenset[int],
                     tolerances: Tolerances) -> Callable[[int, np.ndarray], TokenCheck]:
    """The per-step check a replay runs: steps 0..len(output_ids)-1 check the output, the last
    step checks how the output ended."""

    def check(step: int, logits: np.ndarray) -> TokenCheck:
        if step < len(output_ids):
            token = output_ids[step]
            ok, preferred = token_is_plausible(logits, token, step, sampling, tolerances)
            if token in end_token_ids:
                return TokenCheck(step, token, False, preferred, "an end token inside the output")
            return TokenCheck(step, token, ok, preferred, "" if ok else "not what the model samples")
        if finish_reason in (FinishReason.LENGTH, FinishReason.CUT_OFF):  # no claim of an end
            return TokenCheck(step, NO_TOKEN, True, NO_TOKEN)
        verdicts = [token_is_plausible(logits, t, step, sampling, tolerances) for t in sorted(end_token_ids)]
        ok = any(found for found, _ in verdicts)
        preferred = verdicts[0][1] if verdicts else NO_TOKEN
        return TokenCheck(step, NO_TOKEN, ok, preferred,
                          "" if ok else "claims the model ended here, but it would go on")

    return check
