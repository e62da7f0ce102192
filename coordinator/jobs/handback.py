"""Handing a job back when its node goes away.

Before its first token a job goes back to the queue and is placed again; the
consumer never sees the failure. After tokens were streamed it fails with a
clear error instead, since a second run would show the consumer other text.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from contracts.ids import JobId
from coordinator.jobs import ending
from coordinator.model import ACTIVE_STATUSES, JobStatus
from coordinator.storage import job_rows
from coordinator.verification.outcomes import CheckContext


def hand_back_jobs(session: Session, node_id: str, reason: str, now_ms: int,
                   context: CheckContext) -> list[JobId]:
    """Release every active job of a node; returns the jobs touched."""
    touched = []
    for found in job_rows.active_jobs_for_node(session, node_id):
        # The job's row before its assignments (the order a receipt or a cancel takes them);
        # the job may have ended since it was read.
        job = job_rows.job_by_id(session, found.job_id, for_update=True)
        if job is None or job.status not in ACTIVE_STATUSES or node_id not in job.node_ids:
            continue
        job_rows.deactivate_assignments(session, job.job_id)
        if job_rows.token_count(session, job.job_id) == 0:
            job_rows.transition_job(session, job.job_id, ACTIVE_STATUSES, status=JobStatus.QUEUED,
                                   assigned_at_ms=None, started_at_ms=None,
                                   partial_receipt_body=None, partial_receipt_signature=None)
        else:
            ending.fail_job(session, job.job_id, now_ms,
                            error=f"node {node_id} stopped mid-stream ({reason}); resubmit the job",
                            context=context)
        touched.append(job.job_id)
    return touched
