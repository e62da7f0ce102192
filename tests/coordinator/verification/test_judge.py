"""The judge over synthetic replays: what passes, and what each failure says."""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from contracts.commitments import (
    CANDIDATES, ActivationCommitment, TopCandidates, chunk_key, commit_chunk, encode_commitment,
)
from contracts.ids import JobId, NodeId
from contracts.receipts import FinishReason, Receipt, output_digest, prompt_digest
from coordinator.verification.judge import ReplayFacts, judge
from coordinator.verification.tokens import NO_TOKEN, TokenCheck
from coordinator.verification.tolerances import DEFAULT_TOLERANCES

TOKENS = tuple(range(40))  # two generated chunks: 0-31 and 32-39


def _candidates(seed: int) -> TopCandidates:
    values = np.random.default_rng(seed).normal(0, 2, 32 * 64).astype(np.float32)
    order = np.argsort(-np.abs(values), kind="stable")[:CANDIDATES]
    return TopCandidates(tuple(int(i) for i in order), tuple(float(values[i]) for i in order))


STATES = (_candidates(0), _candidates(1), _candidates(2))


def _receipt(job_id: str = "job-j", **changes: object) -> Receipt:
    chunks = [commit_chunk(c, chunk_key(job_id, n)) for n, c in enumerate(STATES)]
    receipt = Receipt(JobId(job_id), NodeId("node-n"), "m", "w", prompt_digest("p"), 0.0, 1.0, 0, 40,
                      output_digest(TOKENS), 9, len(TOKENS), 1, 3,
                      encode_commitment(ActivationCommitment(chunks[0], tuple(chunks[1:]))),
                      FinishReason.LENGTH, 2)
    return dataclasses.replace(receipt, **changes)  # type: ignore[arg-type]


def _replay(states: tuple[TopCandidates, ...] = STATES, bad_steps: frozenset[int] = frozenset()) -> ReplayFacts:
    checks = tuple(TokenCheck(s, TOKENS[s], s not in bad_steps, 999, "" if s not in bad_steps else "not what the model samples")
                   for s in range(len(TOKENS))) + (TokenCheck(len(TOKENS), NO_TOKEN, True, NO_TOKEN),)
    return ReplayFacts(9, states[0], states[1:], checks)


def test_a_matching_replay_passes_with_evidence() -> None:
    verdict = judge(_receipt(), _replay(), DEFAULT_TOLERANCES)
    assert verdict.passed and verdict.reasons == ()
    assert [c.label for c in verdict.chunks] == ["prompt", "tokens 0-31", "tokens 32-39"]
    assert json.loads(json.dumps(verdict.evidence()))["tokens_checked"] == 41


def test_other_states_fail_the_chunk_they_touch() -> None:
    verdict = judge(_receipt(), _replay((STATES[0], _candidates(9), STATES[2])), DEFAULT_TOLERANCES)
    assert not verdict.passed and [c.ok for c in verdict.chunks] == [True, False, True]
    assert verdict.reasons[0].startswith("tokens 0-31: ")


def test_a_commitment_for_another_job_fails_every_chunk() -> None:
    receipt = dataclasses.replace(_receipt(), activation_commitment=_receipt("job-other").activation_commitment)
    assert not any(c.ok for c in judge(receipt, _replay(), DEFAULT_TOLERANCES).chunks)


def test_bad_tokens_are_counted_and_the_first_is_named() -> None:
    verdict = judge(_receipt(), _replay(bad_steps=frozenset({3, 17})), DEFAULT_TOLERANCES)
    assert not verdict.passed and "2 of 40 output tokens" in verdict.reasons[0]
    assert "first: token 3, id 3" in verdict.reasons[0] and len(verdict.bad_tokens) == 2


def test_claims_that_do_not_fit_the_replay_fail() -> None:
    assert "the prompt is 9 tokens" in judge(_receipt(prompt_tokens=8), _replay(), DEFAULT_TOLERANCES).reasons[0]
    truncated = judge(_receipt(max_tokens=64), _replay(), DEFAULT_TOLERANCES)
    assert "truncated" in truncated.reasons[0]
    unreadable = judge(_receipt(activation_commitment=b"\x01"), _replay(), DEFAULT_TOLERANCES)
    assert "unreadable" in unreadable.reasons[0]
    old = _receipt(activation_commitment=b"", first_token_at_ms=0, version=1)
    assert "version 1" in judge(old, _replay(), DEFAULT_TOLERANCES).reasons[0]


def _nudged(states: tuple[TopCandidates, ...], count: int) -> tuple[TopCandidates, ...]:
    """Each chunk's `count` strongest values made stronger by far more than a unit: they stay the
    strongest (same positions) but no longer match what was committed."""
    def nudge(c: TopCandidates) -> TopCandidates:
        order = sorted(range(len(c.values)), key=lambda i: -abs(c.values[i]))[:count]
        step = max(abs(v) for v in c.values) * 0.01
        return TopCandidates(c.indices, tuple(v + np.sign(v) * step if i in order else v
                                              for i, v in enumerate(c.values)))
    return tuple(nudge(c) for c in states)


def test_each_commitment_version_is_judged_by_its_own_allowance() -> None:
    """Version 1 (top 128) keeps its 8 mismatches per chunk; version 2 (top 64) allows 4."""
    v1_chunks = [commit_chunk(c, chunk_key("job-j", n), top_k=128) for n, c in enumerate(STATES)]
    v1 = _receipt(activation_commitment=encode_commitment(ActivationCommitment(v1_chunks[0], tuple(v1_chunks[1:]))))
    for receipt, allowed, compared in ((v1, DEFAULT_TOLERANCES.mismatches_per_chunk_max, 128),
                                       (_receipt(), DEFAULT_TOLERANCES.mismatches_per_chunk_max_v2, 64)):
        within = judge(receipt, _replay(_nudged(STATES, allowed)), DEFAULT_TOLERANCES)
        assert within.passed and all(c.compared == compared and c.mismatched == allowed for c in within.chunks)
        beyond = judge(receipt, _replay(_nudged(STATES, allowed + 1)), DEFAULT_TOLERANCES)
        assert not beyond.passed and f"at most {allowed} may" in beyond.reasons[0]
