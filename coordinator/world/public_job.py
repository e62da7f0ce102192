"""A job as anyone may see it, pure: where it ran and why, its timing, its receipt and check.

Never the prompt, the output, their digests (a short prompt's sha256 can be
guessed back), the consumer or the key that paid. Free text a node sent is not
shown either: only the coordinator's own wording.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from contracts.receipts import Receipt, ReceiptFormatError, decode_receipt
from coordinator.model import JobRecord
from coordinator.world.earnings import CheckFacts, JobPay, money

# Failure texts the coordinator writes itself; anything else came from a node.
_OWN_ERROR_PREFIXES = ("unplaceable:", "cancelled", "heartbeats stopped", "node left")
NODE_FAILURE = "the node reported a failure"
EXPLANATION_CANDIDATES_MAX = 10


@dataclass(frozen=True)
class PlacedNode:
    node_id: str
    name: str
    chip: str
    layers: int


def public_error(job: JobRecord) -> str | None:
    if job.error is None:
        return None
    if job.error.startswith(_OWN_ERROR_PREFIXES):
        return job.error[:300]
    return NODE_FAILURE


def _span_ms(start: int | None, end: int | None) -> int | None:
    return None if start is None or end is None else max(0, end - start)


def timing_json(job: JobRecord, receipt: Receipt | None) -> dict[str, object]:
    first_token = receipt.first_token_at_ms if receipt is not None and receipt.first_token_at_ms else None
    run_ms = None if receipt is None else max(0, receipt.finished_at_ms - receipt.started_at_ms)
    rate = None
    if receipt is not None and run_ms:
        rate = round(receipt.completion_tokens * 1000 / run_ms, 2)
    return {
        "created_at_ms": job.created_at_ms, "assigned_at_ms": job.assigned_at_ms,
        "started_at_ms": job.started_at_ms, "finished_at_ms": job.finished_at_ms,
        "queued_ms": _span_ms(job.created_at_ms, job.assigned_at_ms),
        "total_ms": _span_ms(job.created_at_ms, job.finished_at_ms),
        "node_run_ms": run_ms,
        "time_to_first_token_ms": None if first_token is None or receipt is None
        else max(0, first_token - receipt.started_at_ms),
        "tokens_per_s": rate,
    }


def explanation_json(text: str | None, names: Mapping[str, str]) -> dict[str, object] | None:
    """The planner's explanation as stored, with a display name beside each candidate id."""
    if not text:
        return None
    data = json.loads(text)
    data.pop("job_id", None)
    candidates = data.get("top_candidates", [])[:EXPLANATION_CANDIDATES_MAX]
    data["top_candidates"] = [{**c, "name": names.get(c.get("id", ""), c.get("id", ""))}
                              for c in candidates]
    chosen = data.get("chosen")
    data["chosen_name"] = names.get(chosen, chosen) if chosen else None
    return data


def receipt_json(job: JobRecord, signer_public_key: bytes) -> dict[str, object] | None:
    if job.receipt_body is None:
        return None
    try:
        receipt = decode_receipt(job.receipt_body)
    except ReceiptFormatError as error:
        return {"decodable": False, "problem": str(error)}
    return {
        "decodable": True, "version": receipt.version, "node_id": receipt.node_id,
        "model_id": receipt.model_id, "weights_digest": receipt.weights_digest,
        "temperature": receipt.temperature, "top_p": receipt.top_p, "max_tokens": receipt.max_tokens,
        "prompt_tokens": receipt.prompt_tokens, "completion_tokens": receipt.completion_tokens,
        "finish_reason": receipt.finish_reason.name.lower(),
        "started_at_ms": receipt.started_at_ms, "first_token_at_ms": receipt.first_token_at_ms or None,
        "finished_at_ms": receipt.finished_at_ms,
        "activation_commitment_bytes": len(receipt.activation_commitment),
        "signature": (job.receipt_signature or b"").hex(),
        "signer_public_key": signer_public_key.hex(),
        "body_bytes": len(job.receipt_body),
    }


def check_json(job: JobRecord, pay: JobPay, check: CheckFacts | None = None) -> dict[str, object]:
    if job.receipt_body is None:
        summary = "no receipt yet" if job.status in ("queued", "assigned", "running") else "no receipt"
    elif not job.receipt_verified:
        summary = "receipt did not verify"
    else:
        summary = {"paid": "receipt verified; operator paid",
                   "held": "receipt verified; pay held for the proof check",
                   "rejected": "receipt verified, but the proof check failed",
                   "expired": "receipt verified; the held pay expired",
                   "unpaid": "receipt verified; nothing paid"}[pay.state.value]
    # The check's status and times only: its reason and evidence name output tokens.
    proof_check = None if check is None else {
        "status": check.status, "sampled": check.sampled, "hold_until_ms": check.hold_until_ms,
        "checked_at_ms": check.checked_at_ms}
    return {"receipt_verified": job.receipt_verified, "pay_state": pay.state.value,
            "pay": money(pay.amount), "summary": summary, "proof_check": proof_check}


def public_job(job: JobRecord, placed: tuple[PlacedNode, ...], names: Mapping[str, str],
               signer_public_key: bytes, pay: JobPay, check: CheckFacts | None = None) -> dict[str, object]:
    """The public JSON of a job (coordinator/world/API.md)."""
    receipt = None
    if job.receipt_body is not None:
        try:
            receipt = decode_receipt(job.receipt_body)
        except ReceiptFormatError:
            receipt = None
    return {
        "job_id": job.job_id, "model_id": job.model_id, "status": job.status.value,
        "error": public_error(job), "attempt": job.attempt,
        "timing": timing_json(job, receipt),
        "placement": {
            "strategy": job.strategy,
            "nodes": [{"node_id": p.node_id, "name": p.name, "chip": p.chip, "layers": p.layers}
                      for p in placed],
            "explanation": explanation_json(job.explanation_json, names),
        },
        "receipt": receipt_json(job, signer_public_key),
        "check": check_json(job, pay, check),
    }
