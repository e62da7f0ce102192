"""Helpers for tests that need receipts the coordinator's door accepts without running a model."""

from __future__ import annotations

from contracts.commitments import (
    TOP_K, ActivationCommitment, ChunkCommitment, encode_commitment, generated_chunk_count,
)


def well_formed_commitment(completion_tokens: int) -> bytes:
    """A commitment of the right shape for that many tokens; its values prove nothing."""
    blank = ChunkCommitment(0, (0,) * TOP_K)
    return encode_commitment(ActivationCommitment(blank, (blank,) * generated_chunk_count(completion_tokens)))



def signed_receipt(identity, job, tokens: tuple[int, ...], prompt_tokens: int,  # type: ignore[no-untyped-def]
                   weights_digest: str, now_ms: int, finish=None):
    """A receipt the node signs over these tokens of the job: a partial one (finish reason
    CUT_OFF) unless finish says how the job ended."""
    from contracts.ids import JobId
    from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
    from coordinator.model import SignedReceipt

    body = encode_receipt(Receipt(
        JobId(job.job_id), identity.node_id, job.model_id, weights_digest, prompt_digest(job.prompt),
        job.temperature, job.top_p, job.seed, job.max_tokens, output_digest(tokens), prompt_tokens,
        len(tokens), now_ms, now_ms, well_formed_commitment(len(tokens)),
        FinishReason.CUT_OFF if finish is None else finish, now_ms))
    return SignedReceipt(body, identity.sign(body))


def signed_partial_receipt(identity, job, tokens: tuple[int, ...], prompt_tokens: int,  # type: ignore[no-untyped-def]
                           weights_digest: str, now_ms: int):
    """A partial receipt (finish reason CUT_OFF) the node signs over the tokens made so far."""
    return signed_receipt(identity, job, tokens, prompt_tokens, weights_digest, now_ms)
