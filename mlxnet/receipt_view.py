"""Checks a job's receipt on the consumer's side and renders it for people."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.ids import node_id_from_public_key
from contracts.receipts import Receipt, ReceiptFormatError, decode_receipt, output_digest, prompt_digest
from contracts.signing import PUBLIC_KEY_BYTES, signature_is_valid


@dataclass(frozen=True)
class ReceiptCheck:
    receipt: Receipt | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.receipt is not None and not self.problems


def check_receipt_locally(body: bytes, signature: bytes, signer_public_key: bytes,
                          prompt: str, token_ids: tuple[int, ...]) -> ReceiptCheck:
    """Everything a consumer can check without trusting the coordinator."""
    try:
        receipt = decode_receipt(body)
    except ReceiptFormatError as error:
        return ReceiptCheck(None, (str(error),))
    problems = []
    if len(signer_public_key) != PUBLIC_KEY_BYTES or \
            node_id_from_public_key(signer_public_key) != receipt.node_id:
        problems.append("signer key does not belong to the node named in the receipt")
    elif not signature_is_valid(signer_public_key, body, signature):
        problems.append("signature does not verify")
    if receipt.prompt_digest != prompt_digest(prompt):
        problems.append("prompt digest is not this prompt's")
    if receipt.output_digest != output_digest(token_ids):
        problems.append("output digest is not the tokens received")
    return ReceiptCheck(receipt, tuple(problems))


def render_receipt(check: ReceiptCheck) -> str:
    if check.receipt is None:
        return f"receipt: unreadable ({'; '.join(check.problems)})"
    r = check.receipt
    verdict = "verified" if check.ok else "REJECTED: " + "; ".join(check.problems)
    return "\n".join([
        f"receipt ({verdict})",
        f"  job          {r.job_id}",
        f"  node         {r.node_id}",
        f"  model        {r.model_id}",
        f"  weights      sha256:{r.weights_digest[:16]}…",
        f"  prompt       sha256:{r.prompt_digest.hex()[:16]}… ({r.prompt_tokens} tokens)",
        f"  output       sha256:{r.output_digest.hex()[:16]}… ({r.completion_tokens} tokens)",
        f"  sampling     temperature={r.temperature} top_p={r.top_p} seed={r.seed}",
        f"  time         {r.finished_at_ms - r.started_at_ms} ms",
    ])
