"""Checks a node's completion receipt against what the coordinator knows.

Pure: it takes the receipt bytes, the signature, the node's public key and
the facts recorded for the job, and returns every problem it finds.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.receipts import Receipt, ReceiptFormatError, decode_receipt, output_digest, prompt_digest
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


def _field_problems(receipt: Receipt, expected: ExpectedJob) -> list[str]:
    mismatch = "does not match the job"
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
        (receipt.output_digest == output_digest(expected.streamed_token_ids),
         "output digest differs from the tokens streamed"),
        (receipt.completion_tokens == len(expected.streamed_token_ids),
         "completion token count differs from the tokens streamed"),
        (receipt.completion_tokens <= expected.max_tokens, "more completion tokens than max_tokens"),
        (receipt.prompt_tokens > 0, "prompt token count must be positive"),
        (receipt.finished_at_ms >= receipt.started_at_ms, "finished before it started"),
    ]
    return [message for ok, message in checks if not ok]


def check_receipt(body: bytes, signature: bytes, public_key: bytes,
                  expected: ExpectedJob) -> ReceiptVerdict:
    signature_ok = signature_is_valid(public_key, body, signature)
    try:
        receipt = decode_receipt(body)
    except ReceiptFormatError as error:
        return ReceiptVerdict(None, signature_ok, (str(error),))
    return ReceiptVerdict(receipt, signature_ok, tuple(_field_problems(receipt, expected)))
