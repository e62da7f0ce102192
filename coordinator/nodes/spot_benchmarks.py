"""Challenge benchmarks: a verified Mac re-checked at random times. Pure, over plain values.

A node's self-benchmark is its own claim. So at random times (a Poisson process, so a node
cannot tell when the next comes) the coordinator sends a verified Mac a decode of its own
choosing in the assignment stream: a random prompt and seed on the reference model, long
enough to take about CHALLENGE_DECODE_S at the claimed speed. The coordinator times it, from
handing it to the stream to the answer. An answer that is short, late, or missing means the
claimed speed was not real: the hardware goes back to "claimed" (placed as the slowest Mac,
no Ultra-seat bonus) until a later challenge passes. A fresh self-benchmark does not clear it.

Timing alone proves nothing (a script can sleep, then send garbage), so the node runs the
challenge as a job and signs a receipt over it: its tokens and activation commitment are
replayed by the coordinator's verifier like a checked job's. Only a replay that agrees passes
the challenge, and only a passed challenge earns the Ultra-seat bonus (NodeRecord.hardware_proven).
"""

from __future__ import annotations

import math
import random
import secrets
from contracts.benchmarks import CHALLENGE_TEMPERATURE, CHALLENGE_TOP_P
from contracts.limits import CHALLENGE_TOKENS_MAX
from contracts.receipts import FinishReason
from coordinator.jobs.receipt_check import ExpectedJob, ReceiptVerdict
from coordinator.model import CHALLENGE_PASSED, SpotChallenge
from coordinator.verification.judge import CheckVerdict

CHALLENGE_DECODE_S = 1.0  # the decode's length at the claimed speed
DECODE_TOKENS_MIN = 32
# The reference model's context (2,048) less room for the prompt: a longer decode would not fit.
DECODE_TOKENS_MAX = min(CHALLENGE_TOKENS_MAX, 1_920)
# Measured over claimed below this fails. Wide (a Mac decoding a job meanwhile, a cold start, a
# longer context than the benchmark's), yet it tells speed classes apart: an M4 moves memory at
# a seventh of an M3 Ultra's rate, an M4 Pro at a third.
RATE_FRACTION_MIN = 0.25
# Measured over claimed above this fails too: no Mac decodes thrice as fast as its own
# benchmark, so the answer was not decoded (or the benchmark was not its own).
RATE_FRACTION_MAX = 3.0
# Time a fair answer may need besides the decode: loading the model, the prompt, the round trip.
OVERHEAD_MS = 3_000
ANSWER_DEADLINE_MS = 60_000  # past this a sent challenge counts as unanswered
PROMPT_WORDS = 24
_WORDS = ("river", "stone", "orbit", "lantern", "copper", "meadow", "signal", "harbor", "violet",
          "engine", "glacier", "atlas", "ember", "cipher", "willow", "quartz", "summit", "thread",
          "falcon", "prairie", "beacon", "delta", "marble", "canyon", "saffron", "tundra")
PASSED = CHALLENGE_PASSED
REPLAY_REASONS_CHARS_MAX = 1_000


def is_due(rng: random.Random, pass_interval_s: float, mean_interval_s: float) -> bool:
    """Whether a node gets a challenge this pass: on average one per mean_interval_s, at
    random times (each pass independently, so the wait is memoryless)."""
    assert pass_interval_s > 0 and mean_interval_s > 0
    return rng.random() < -math.expm1(-pass_interval_s / mean_interval_s)


def decode_tokens_for(claimed_tokens_per_s: float) -> int:
    """About CHALLENGE_DECODE_S of decoding at the claimed speed, within the edge's bound."""
    wanted = claimed_tokens_per_s * CHALLENGE_DECODE_S
    if not math.isfinite(wanted):  # (the edge bounds a benchmark's figures; this stays total)
        wanted = 0.0
    return max(DECODE_TOKENS_MIN, min(DECODE_TOKENS_MAX, math.ceil(wanted)))


def new_challenge(rng: random.Random, node_id: str, model_id: str, claimed_tokens_per_s: float,
                  now_ms: int) -> SpotChallenge:
    prompt = " ".join(rng.choice(_WORDS) for _ in range(PROMPT_WORDS))
    return SpotChallenge(
        challenge_id=f"challenge-{secrets.token_hex(12)}", node_id=node_id, model_id=model_id,
        prompt=prompt, seed=rng.getrandbits(63), decode_tokens=decode_tokens_for(claimed_tokens_per_s),
        issued_at_ms=now_ms, claimed_tokens_per_s=claimed_tokens_per_s)


def allowed_ms(challenge: SpotChallenge) -> int:
    """The longest an answer may take and still fit the claimed speed."""
    decode_s = challenge.decode_tokens / (RATE_FRACTION_MIN * challenge.claimed_tokens_per_s)
    return OVERHEAD_MS + math.ceil(1000 * decode_s)


def answer_problem(challenge: SpotChallenge, tokens_answered: int, answered_at_ms: int,
                   ended_on_end_token: bool = False) -> str | None:
    """Why the answer's timing does not fit the claim, or None when it does. An answer may be
    short only when it says the model sampled an end token (its replay checks that)."""
    assert challenge.sent_at_ms is not None, "only a sent challenge is answered"
    ended_early = ended_on_end_token and 0 < tokens_answered < challenge.decode_tokens
    if tokens_answered != challenge.decode_tokens and not ended_early:
        return (f"challenge benchmark answered {tokens_answered} tokens; "
                f"{challenge.decode_tokens} were asked for")
    took_ms = max(1, answered_at_ms - challenge.sent_at_ms)
    measured = 1000 * tokens_answered / took_ms
    if measured > RATE_FRACTION_MAX * challenge.claimed_tokens_per_s:
        return (f"challenge benchmark answered {tokens_answered} tokens in {took_ms} ms "
                f"({measured:.1f} tok/s), faster than {RATE_FRACTION_MAX:g}x the "
                f"{challenge.claimed_tokens_per_s:.1f} tok/s its benchmark claims: it was not decoded")
    if took_ms > allowed_ms(challenge):
        return (f"challenge benchmark decoded {tokens_answered} tokens in {took_ms} ms "
                f"({measured:.1f} tok/s); the node's benchmark claims "
                f"{challenge.claimed_tokens_per_s:.1f} tok/s, so it had {allowed_ms(challenge)} ms")
    return None


def expected_answer(challenge: SpotChallenge, weights_digest: str, token_ids: tuple[int, ...]) -> ExpectedJob:
    """The job a challenge is, for its receipt's check (coordinator/jobs/receipt_check.py):
    weights_digest is the reference model's as the coordinator's verifier holds it."""
    return ExpectedJob(job_id=challenge.challenge_id, node_id=challenge.node_id, model_id=challenge.model_id,
                       weights_digest=weights_digest, prompt=challenge.prompt,
                       temperature=CHALLENGE_TEMPERATURE, top_p=CHALLENGE_TOP_P, seed=challenge.seed,
                       max_tokens=challenge.decode_tokens, streamed_token_ids=token_ids)


def receipt_problem(verdict: ReceiptVerdict | None) -> str | None:
    """Why the answer's signed receipt cannot be replayed as this challenge, or None."""
    if verdict is None:
        return "challenge benchmark answered without a signed receipt: its tokens cannot be replayed"
    if not verdict.signature_ok:
        return "challenge benchmark receipt is not signed by the node's key"
    if verdict.problems:
        return "challenge benchmark receipt does not match the challenge: " + "; ".join(verdict.problems)
    return None


def ended_on_end_token(verdict: ReceiptVerdict | None) -> bool:
    return verdict is not None and verdict.receipt is not None \
        and verdict.receipt.finish_reason is FinishReason.END_TOKEN


def replay_problem(verdict: CheckVerdict) -> str | None:
    """Why the replay of the answer's tokens and commitment disagrees, or None when it agrees."""
    if verdict.passed:
        return None
    # Chunk by chunk the commitment's reasons run long; one line for them keeps the tokens' in view.
    bad_chunks = [c.label for c in verdict.chunks if not c.ok]
    chunk_reasons = [r for r in verdict.reasons if r.split(":", 1)[0] in bad_chunks]
    reasons = [r for r in verdict.reasons if r not in chunk_reasons]
    if chunk_reasons:
        reasons.append(f"{len(bad_chunks)} of {len(verdict.chunks)} chunks' committed activations differ "
                       f"from the replay (first, {chunk_reasons[0]})")
    text = "; ".join(reasons)[:REPLAY_REASONS_CHARS_MAX]
    return f"challenge benchmark failed its replay (the tokens were not decoded on the reference model): {text}"


def unreplayable_problem(reason: str) -> str:
    """The answer could not be replayed at all (an id past the vocabulary, other weights, a crash):
    nothing proves the claim, so it stays a claim until a later challenge passes."""
    return f"challenge benchmark answer could not be replayed: {reason[:REPLAY_REASONS_CHARS_MAX]}"


def unanswered_problem(challenge: SpotChallenge) -> str:
    return (f"challenge benchmark sent at {challenge.sent_at_ms} was not answered within "
            f"{ANSWER_DEADLINE_MS // 1000} s")
