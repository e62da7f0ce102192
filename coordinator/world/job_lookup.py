"""Reads one job for its public page: the job, the Macs it ran on, its receipt signer and its pay."""

from __future__ import annotations

import json

from sqlalchemy import select
from sqlalchemy.orm import Session

from contracts.receipts import ReceiptFormatError, decode_receipt
from coordinator.errors import InvalidRequest, NotFound
from coordinator.model import JobRecord
from coordinator.storage import job_rows
from coordinator.storage.tables import job_assignments, nodes
from coordinator.verification import store as check_store
from coordinator.world.earnings import CheckFacts, JobPay, job_pay
from coordinator.world.public_job import PlacedNode, public_job
from coordinator.world.queries import display_names
from ledger.api import operator_account_id, transfers_for_job

JOB_ID_CHARS_MAX = 64


def check_job_id(job_id: str) -> None:
    if not job_id or len(job_id) > JOB_ID_CHARS_MAX or not job_id.isprintable():
        raise InvalidRequest(f"a job id is 1-{JOB_ID_CHARS_MAX} printable characters, like "
                             "job-0123abcd...", param="job_id")


def signer_node_id(job: JobRecord) -> str | None:
    """The node that signed the job's receipt, or else the first node it was placed on."""
    if job.receipt_body is not None:
        try:
            return decode_receipt(job.receipt_body).node_id
        except ReceiptFormatError:
            pass
    return job.node_ids[0] if job.node_ids else None


def check_of(session: Session, job_id: str) -> CheckFacts | None:
    check = check_store.check_by_job(session, job_id)
    if check is None:
        return None
    return CheckFacts(check.status.value, check.sampled, check.reason, check.hold_until_ms, check.checked_at_ms)


def pay_of(session: Session, job: JobRecord, check: CheckFacts | None) -> JobPay:
    signer = signer_node_id(job)
    operator = None if signer is None else session.execute(
        select(nodes.c.operator_id).where(nodes.c.node_id == signer)).scalar()
    account = "" if operator is None else operator_account_id(operator)
    return job_pay(job.job_id, job.status.value, job.error, job.receipt_verified,
                   transfers_for_job(session, job.job_id), account, check)


def _layers(session: Session, job: JobRecord) -> dict[str, int]:
    rows = session.execute(select(job_assignments.c.node_id, job_assignments.c.layers).where(
        job_assignments.c.job_id == job.job_id, job_assignments.c.attempt == job.attempt))
    return {node_id: int(layers) for node_id, layers in rows}


def _candidate_ids(job: JobRecord) -> list[str]:
    if not job.explanation_json:
        return []
    data = json.loads(job.explanation_json)
    return [c["id"] for c in data.get("top_candidates", []) if "id" in c]


def job_json(session: Session, job_id: str) -> dict[str, object]:
    """The public JSON of one job; NotFound for an unknown id."""
    check_job_id(job_id)
    job = job_rows.job_by_id(session, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist; check the id")
    signer = signer_node_id(job)
    known = display_names(session, [*job.node_ids, *_candidate_ids(job), *([signer] if signer else [])])
    layers = _layers(session, job)
    placed = tuple(PlacedNode(node_id, *known.get(node_id, (node_id, "")), layers.get(node_id, 0))
                   for node_id in job.node_ids)
    public_key = b""
    if job.receipt_body is not None and signer is not None:
        public_key = session.execute(select(nodes.c.public_key)
                                     .where(nodes.c.node_id == signer)).scalar() or b""
    names = {node_id: name for node_id, (name, _) in known.items()}
    check = check_of(session, job.job_id)
    return public_job(job, placed, names, public_key, pay_of(session, job, check), check)
