"""A job's chunk commitments are made once across its partial receipts and its final one, and every
commitment is byte for byte the one a fresh computation gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.commitments import CANDIDATES, ActivationCommitment, TopCandidates, chunk_key, commit_chunk, encode_commitment
from contracts.receipts import FinishReason
from node_agent.inference.activations import Decoded
from node_agent.inference.engine import ChunkCommitments


def _candidates(seed: int) -> TopCandidates:
    values = np.random.default_rng(seed).standard_normal(32 * 64).astype(np.float32)
    order = np.argsort(-np.abs(values), kind="stable")[:CANDIDATES]
    return TopCandidates(tuple(int(i) for i in order), tuple(float(values[i]) for i in order))


def _fresh(job_id: str, decoded: Decoded) -> bytes:
    return encode_commitment(ActivationCommitment(
        commit_chunk(decoded.prompt, chunk_key(job_id, 0)),
        tuple(commit_chunk(c, chunk_key(job_id, n + 1)) for n, c in enumerate(decoded.generated))))


def _decoded(prompt: TopCandidates, generated: list[TopCandidates]) -> Decoded:
    return Decoded(tuple(range(32 * len(generated))), FinishReason.CUT_OFF, 8, prompt, tuple(generated))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=5), st.integers(0, 10**6))
def test_partial_and_final_commitments_equal_fresh_ones_and_each_chunk_is_made_once(seeds, prompt_seed) -> None:
    committed = ChunkCommitments(jobs_max=4)
    prompt, chunks = _candidates(prompt_seed), [_candidates(seed) for seed in seeds]
    for filled in range(1, len(chunks) + 1):  # a partial receipt as each chunk fills
        decoded = _decoded(prompt, chunks[:filled])
        assert committed.commitment("job-a", decoded, last=False) == _fresh("job-a", decoded)
    kept = committed._jobs["job-a"]
    assert sorted(kept) == list(range(len(chunks) + 1))  # the prompt and every chunk, once each
    made = {number: commitment for number, (_, commitment) in kept.items()}
    final = _decoded(prompt, chunks)
    assert committed.commitment("job-a", final, last=True) == _fresh("job-a", final)
    assert all(kept[number][1] is made[number] for number in made)  # reused, not made again
    assert "job-a" not in committed._jobs  # the last one lets the job's chunks go


def test_other_candidates_at_a_kept_number_are_committed_afresh_and_old_jobs_leave() -> None:
    committed = ChunkCommitments(jobs_max=2)
    first = _decoded(_candidates(1), [_candidates(2)])
    committed.commitment("job-a", first, last=False)
    changed = _decoded(_candidates(1), [_candidates(3)])  # never so for one job; still never stale
    assert committed.commitment("job-a", changed, last=False) == _fresh("job-a", changed)
    assert committed.commitment("job-b", first, last=False) == _fresh("job-b", first)  # its own keys
    committed.commitment("job-c", first, last=False)
    assert list(committed._jobs) == ["job-b", "job-c"]  # at most jobs_max kept, oldest out
