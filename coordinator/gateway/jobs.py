"""GET /v1/jobs/{id} and its receipt, and GET /v1/models: coordinator values as JSON."""

from __future__ import annotations

import base64
import dataclasses
import json

from contracts.receipts import ReceiptFormatError, decode_receipt
from coordinator.errors import NotFound
from coordinator.gateway.render import ended_well, finish_reason, job_usage
from coordinator.money.job_money import JobCost
from coordinator.scheduling.capacity import ModelCapacity
from coordinator.service import JobView
from ledger.api import BASE_UNITS_PER_MLX

OWNER = "mlxnet"
HOW_TO_VERIFY = (
    "Check signature_base64 over body_base64 with the Ed25519 key signer_public_key_base64; "
    "check the key hashes to the receipt's node_id (node- + the first 24 hex digits of its "
    "sha256); check prompt_digest is sha256 of the prompt text you sent (for chat, the "
    "canonical messages of contracts/chat.py) and output_digest is sha256 over the generated "
    "token ids as big-endian u32. `mlxnet submit` does all of this for you."
)


def model_json(capacity: ModelCapacity) -> dict:
    spec = capacity.spec
    return {
        "id": spec.model_id, "object": "model", "created": capacity.first_registered_ms // 1000,
        "owned_by": OWNER, "max_context_tokens": spec.max_context_tokens,
        "parameter_count": spec.parameter_count, "weights_bytes": spec.weights_bytes,
        "capacity": {"macs_serving": capacity.macs_serving,
                     "macs_available": capacity.macs_available,
                     "predicted_decode_tokens_per_s": capacity.predicted_decode_tokens_per_s,
                     "context_tokens": capacity.context_tokens}}


def _finish_reason(view: JobView) -> str | None:
    return finish_reason(view.job, False) if ended_well(view.job) else None


def _timing(view: JobView) -> dict:
    job = view.job
    end = job.finished_at_ms
    return {"created_at_ms": job.created_at_ms, "assigned_at_ms": job.assigned_at_ms,
            "first_token_at_ms": job.started_at_ms, "finished_at_ms": end,
            "queued_ms": None if job.assigned_at_ms is None else job.assigned_at_ms - job.created_at_ms,
            "run_ms": None if job.assigned_at_ms is None or end is None else end - job.assigned_at_ms}


def _cost(cost: JobCost) -> dict:
    return {"currency": "MLX", "base_units_per_mlx": BASE_UNITS_PER_MLX, "paid_by": cost.paid_by,
            "reserved_base_units": cost.reserved, "charged_base_units": cost.charged,
            "refunded_base_units": cost.refunded,
            "operator_credit_base_units": cost.operator_credit,
            "operator_credit_state": cost.operator_credit_state,
            "network_fee_base_units": cost.network_fee}


def job_json(view: JobView, cost: JobCost, pod_id: str | None) -> dict:
    job = view.job
    return {
        "id": job.job_id, "object": "mlxnet.job", "status": job.status.value,
        "model": job.model_id, "strategy": job.strategy, "pod_id": pod_id,
        "nodes": [{"node_id": node_id, "chip": chip} for node_id, chip in zip(job.node_ids, view.chips)],
        "attempt": job.attempt, "timing": _timing(view), "usage": job_usage(job, view.streamed_tokens),
        "cost": _cost(cost), "text": view.text, "finish_reason": _finish_reason(view),
        "receipt_available": job.receipt_body is not None, "receipt_verified": job.receipt_verified,
        "error": job.error, "error_code": job.error_code,
        "placement": json.loads(job.explanation_json) if job.explanation_json else None}


def _plain(value: object) -> object:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def receipt_json(view: JobView) -> dict:
    job = view.job
    if job.receipt_body is None or job.receipt_signature is None:
        raise NotFound(f"job {job.job_id} has no receipt yet: it is {job.status.value}; "
                       "receipts come with completion")
    try:
        fields = _plain(dataclasses.asdict(decode_receipt(job.receipt_body)))
    except ReceiptFormatError as error:  # stored receipts were verified, so this is not expected
        fields = {"undecodable": str(error)}
    return {
        "job_id": job.job_id, "object": "mlxnet.receipt",
        "body_base64": base64.b64encode(job.receipt_body).decode(),
        "signature_base64": base64.b64encode(job.receipt_signature).decode(),
        "signer_public_key_base64": base64.b64encode(view.signer_public_key).decode(),
        "verified_by_coordinator": job.receipt_verified, "fields": fields,
        "how_to_verify": HOW_TO_VERIFY}
