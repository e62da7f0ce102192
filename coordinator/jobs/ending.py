"""Ending a job as failed, its money settled in the same write of its row.

Every way a job fails (the consumer cancels, its node reports a failure, its node goes away
mid-stream) ends here: the row is locked, the reservation settled on the streamed tokens
(coordinator.money.job_money), and the row written once with the failure and the close.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from coordinator.model import TERMINAL_STATUSES, JobRecord, JobStatus
from coordinator.money import job_money
from coordinator.storage import job_rows


def fail_job(session: Session, job_id: str, now_ms: int, *, error: str,
             error_code: str | None = None) -> JobRecord | None:
    """Fail the job unless it already ended; returns it as it was before, or None if it had ended."""
    job = job_rows.job_by_id(session, job_id, for_update=True)  # its row before the ledger, always
    if job is None or job.status in TERMINAL_STATUSES:
        return None
    closed = job_money.settle_failed(session, job)
    moved = job_rows.transition_job(
        session, job_id, frozenset({job.status}), status=JobStatus.FAILED, error=error,
        error_code=error_code, finished_at_ms=now_ms,
        billing_closed_at_ms=now_ms if closed else None)
    assert moved, "the job's row is locked by this transaction"
    return job
