"""A receipt's proof against an independent replay of the job. Pure.

The replay (prompt plus the streamed output, one forward pass) gives the
verifier's own strongest hidden-state values for every chunk and a check of
every sampled token. The job passes only when every chunk's committed values
match within tolerance, every token is what the seeded sampler picks, and the
output ended the way the receipt says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from contracts.commitments import (
    CHUNK_TOKENS, CommitmentFormatError, TopCandidates, chunk_key, decode_commitment,
    generated_chunk_count, value_differences,
)
from contracts.receipts import FinishReason, Receipt
from coordinator.verification.tokens import NO_TOKEN, TokenCheck
from coordinator.verification.tolerances import Tolerances


@dataclass(frozen=True)
class ChunkCheck:
    label: str  # "prompt" or "tokens 32-63"
    compared: int
    mismatched: int  # positions off by more than value_units_max
    median_units: float
    ok: bool


@dataclass(frozen=True)
class CheckVerdict:
    passed: bool
    reasons: tuple[str, ...]  # empty when passed
    chunks: tuple[ChunkCheck, ...] = ()
    tokens_checked: int = 0
    bad_tokens: tuple[TokenCheck, ...] = ()

    def evidence(self) -> dict[str, Any]:
        """JSON-ready: what an operator reads to see exactly why a job was or was not paid."""
        return {
            "passed": self.passed,
            "reasons": list(self.reasons),
            "chunks": [vars(c) for c in self.chunks],
            "tokens_checked": self.tokens_checked,
            "bad_tokens": [vars(t) for t in self.bad_tokens],
        }


@dataclass(frozen=True)
class ReplayFacts:
    """What the verifier's replay produced (see node_agent.inference.activations.replay)."""

    prompt_tokens: int
    prompt: TopCandidates
    generated: tuple[TopCandidates, ...]
    token_checks: tuple[TokenCheck, ...]


def _chunk_label(number: int, completion_tokens: int) -> str:
    if number == 0:
        return "prompt"
    first = (number - 1) * CHUNK_TOKENS
    return f"tokens {first}-{min(first + CHUNK_TOKENS, completion_tokens) - 1}"


def _chunk_checks(receipt: Receipt, replay: ReplayFacts, tolerances: Tolerances) -> tuple[list[ChunkCheck], list[str]]:
    try:
        commitment = decode_commitment(receipt.activation_commitment)
    except CommitmentFormatError as error:
        return [], [f"activation commitment unreadable: {error}"]
    expected = generated_chunk_count(receipt.completion_tokens)
    if len(commitment.generated) != expected or len(replay.generated) != expected:
        return [], [f"commitment has {len(commitment.generated)} generated chunks; "
                    f"{receipt.completion_tokens} tokens need {expected}"]
    checks, reasons = [], []
    allowed = tolerances.mismatches_allowed(commitment.version)
    for number, (chunk, mine) in enumerate(zip(commitment.chunks, (replay.prompt, *replay.generated))):
        differences = value_differences(chunk, mine, chunk_key(receipt.job_id, number))
        mismatched = int((differences > tolerances.value_units_max).sum())
        ok = mismatched <= allowed
        label = _chunk_label(number, receipt.completion_tokens)
        median = float(np.median(differences)) if differences.size else 0.0
        checks.append(ChunkCheck(label, int(differences.size), mismatched, median, ok))
        if not ok:
            reasons.append(f"{label}: {mismatched} of {differences.size} committed activations differ "
                           f"from the replay (at most {allowed} may)")
    return checks, reasons


def _token_reasons(receipt: Receipt, checks: tuple[TokenCheck, ...],
                   tolerances: Tolerances) -> tuple[list[TokenCheck], list[str]]:
    if len(checks) != receipt.completion_tokens + 1:
        return [], [f"replay checked {len(checks)} steps for {receipt.completion_tokens} tokens"]
    bad = [c for c in checks if not c.ok]
    reasons = []
    output_bad = [c for c in bad if c.claimed != NO_TOKEN]
    if output_bad:
        first = output_bad[0]
        reasons.append(f"{len(output_bad)} of {receipt.completion_tokens} output tokens are not what "
                       f"the model samples with seed {receipt.seed} (first: token {first.step}, "
                       f"id {first.claimed}, {first.problem}; the replay picks id {first.preferred})")
    if bad and bad[-1].claimed == NO_TOKEN:
        reasons.append(f"the output {bad[-1].problem}")
    return bad[:tolerances.bad_tokens_reported_max], reasons


def judge(receipt: Receipt, replay: ReplayFacts, tolerances: Tolerances) -> CheckVerdict:
    reasons: list[str] = []
    if receipt.version < 2:
        return CheckVerdict(False, ("receipt version 1 carries no activation commitment",))
    if replay.prompt_tokens != receipt.prompt_tokens:
        reasons.append(f"the prompt is {replay.prompt_tokens} tokens; the receipt claims "
                       f"{receipt.prompt_tokens}")
    if receipt.finish_reason is FinishReason.LENGTH and receipt.completion_tokens != receipt.max_tokens:
        reasons.append(f"claims it stopped at max_tokens but made {receipt.completion_tokens} of "
                       f"{receipt.max_tokens}: the output is truncated")
    chunks, chunk_reasons = _chunk_checks(receipt, replay, tolerances)
    bad_tokens, token_reasons = _token_reasons(receipt, replay.token_checks, tolerances)
    reasons += chunk_reasons + token_reasons
    return CheckVerdict(not reasons, tuple(reasons), tuple(chunks), len(replay.token_checks),
                        tuple(bad_tokens))
