"""Helpers for tests that need receipts the coordinator's door accepts without running a model."""

from __future__ import annotations

from contracts.commitments import (
    TOP_K, ActivationCommitment, ChunkCommitment, encode_commitment, generated_chunk_count,
)


def well_formed_commitment(completion_tokens: int) -> bytes:
    """A commitment of the right shape for that many tokens; its values prove nothing."""
    blank = ChunkCommitment(0, (0,) * TOP_K)
    return encode_commitment(ActivationCommitment(blank, (blank,) * generated_chunk_count(completion_tokens)))
