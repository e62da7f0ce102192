"""Checks a node's completion receipt against what the coordinator knows.

Pure: it takes the receipt bytes, the signature, the node's public key and
the facts recorded for the job, and returns every problem it finds.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.commitments import CommitmentFormatError, decode_commitment, generated_chunk_count
from contracts.receipts import (
    FinishReason, Receipt, ReceiptFormatError, decode_receipt, is_partial, output_digest,
    prompt_digest,
)
from contracts.signing import signature_is_valid


@dataclass(frozen=True)
class ExpectedJob:
    job_id: str
    node_id: str
    model_id: str
    weights_digest: str  # what the node advertised for the model when it registered
    prompt: str
    temperature: float
    top_p: float
    seed: int
    max_tokens: int
    streamed_token_ids: tuple[int, ...]


@dataclass(frozen=True)
class ReceiptVerdict:
    receipt: Receipt | None
    signature_ok: bool
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.signature_ok and not self.problems


def _field_problems(receipt: Receipt, expected: ExpectedJob, partial: bool = False) -> list[str]:
    """partial: the receipt proves a prefix of the streamed tokens (finish reason CUT_OFF)."""
    mismatch = "does not match the job"
    proven = expected.streamed_token_ids[:receipt.completion_tokens] if partial \
        else expected.streamed_token_ids
    if partial != is_partial(receipt):
        return ["a partial receipt must say CUT_OFF, and a final receipt must not"]
    checks = [
        (receipt.job_id == expected.job_id, f"job id {mismatch}"),
        (receipt.node_id == expected.node_id, f"node id {mismatch}"),
        (receipt.model_id == expected.model_id, f"model id {mismatch}"),
        (receipt.weights_digest == expected.weights_digest, f"weights digest {mismatch}"),
        (receipt.prompt_digest == prompt_digest(expected.prompt), f"prompt digest {mismatch}"),
        (receipt.temperature == expected.temperature, f"temperature {mismatch}"),
        (receipt.top_p == expected.top_p, f"top_p {mismatch}"),
        (receipt.seed == expected.seed, f"seed {mismatch}"),
        (receipt.max_tokens == expected.max_tokens, f"max_tokens {mismatch}"),
        (receipt.output_digest == output_digest(proven),
         "output digest differs from the tokens streamed"),
        (receipt.completion_tokens == len(proven),
         "completion token count differs from the tokens streamed"),
        (receipt.completion_tokens <= expected.max_tokens, "more completion tokens than max_tokens"),
        (receipt.prompt_tokens > 0, "prompt token count must be positive"),
        (receipt.finished_at_ms >= receipt.started_at_ms, "finished before it started"),
    ]
    return [message for ok, message in checks if not ok] + _proof_problems(receipt)


def _proof_problems(receipt: Receipt) -> list[str]:
    """A version-2 receipt must carry a well-formed proof that fits its own claims."""
    if receipt.version < 2:
        return ["receipt version 1 carries no activation commitment; update the node agent"]
    problems = []
    try:
        commitment = decode_commitment(receipt.activation_commitment)
    except CommitmentFormatError as error:
        problems.append(f"activation commitment is malformed: {error}")
    else:
        expected = generated_chunk_count(receipt.completion_tokens)
        if len(commitment.generated) != expected:
            problems.append(f"activation commitment covers {len(commitment.generated)} chunks of "
                            f"generated tokens; {receipt.completion_tokens} tokens need {expected}")
    if receipt.finish_reason is FinishReason.LENGTH and receipt.completion_tokens != receipt.max_tokens:
        problems.append(f"claims it stopped at max_tokens ({receipt.max_tokens}) after "
                        f"{receipt.completion_tokens} tokens")
    if receipt.completion_tokens and not (
            receipt.started_at_ms <= receipt.first_token_at_ms <= receipt.finished_at_ms):
        problems.append("first token time is outside the job's start and finish")
    return problems


def check_receipt(body: bytes, signature: bytes, public_key: bytes,
                  expected: ExpectedJob, partial: bool = False) -> ReceiptVerdict:
    """partial: a receipt signed mid-job, proving the first completion_tokens streamed tokens."""
    signature_ok = signature_is_valid(public_key, body, signature)
    try:
        receipt = decode_receipt(body)
    except ReceiptFormatError as error:
        return ReceiptVerdict(None, signature_ok, (str(error),))
    return ReceiptVerdict(receipt, signature_ok, tuple(_field_problems(receipt, expected, partial)))
