"""Pure: what a finished job adds to the request metrics (its finish reason and its timings)."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.metrics import names
from coordinator.model import (
    ERROR_CANCELLED,
    ERROR_NO_CAPACITY,
    ERROR_STOP_SEQUENCE,
    JobRecord,
    JobStatus,
)

_FAILED_REASONS = {ERROR_STOP_SEQUENCE: names.FINISHED_STOP, ERROR_CANCELLED: names.FINISHED_ABORT,
                   ERROR_NO_CAPACITY: names.FINISHED_ABORT}


@dataclass(frozen=True)
class FinishedRequest:
    model_name: str
    finished_reason: str
    prompt_tokens: int
    generation_tokens: int
    queue_s: float | None  # created to first assigned; None if it never left the queue
    first_token_s: float | None  # created to first token stored; None if it made none
    e2e_s: float
    inter_token_s: float | None  # the mean interval between its tokens, None under two tokens


def finished_reason(job: JobRecord) -> str:
    """stop or length for a completed job, as vLLM; a failed one's by its error code."""
    assert job.status in (JobStatus.COMPLETED, JobStatus.FAILED)
    if job.status is JobStatus.COMPLETED:
        return names.FINISHED_LENGTH if job.completion_tokens >= job.max_tokens else names.FINISHED_STOP
    return _FAILED_REASONS.get(job.error_code or "", names.FINISHED_ERROR)


def finished_request(job: JobRecord, streamed_tokens: int) -> FinishedRequest:
    """A finished job's figures. streamed_tokens counts a failed job's tokens (a completed one's
    receipt says how many it made)."""
    assert job.finished_at_ms is not None, "only finished jobs are measured"
    generated = job.completion_tokens if job.status is JobStatus.COMPLETED else streamed_tokens
    started = job.started_at_ms
    first_token_s = (started - job.created_at_ms) / 1000 if started is not None else None
    queue_s = ((job.assigned_at_ms - job.created_at_ms) / 1000
               if job.assigned_at_ms is not None else None)
    inter_token_s = ((job.finished_at_ms - started) / 1000 / (generated - 1)
                     if started is not None and generated >= 2 else None)
    return FinishedRequest(
        model_name=job.model_id, finished_reason=finished_reason(job),
        prompt_tokens=job.prompt_tokens, generation_tokens=generated,
        queue_s=None if queue_s is None else max(0.0, queue_s),
        first_token_s=None if first_token_s is None else max(0.0, first_token_s),
        e2e_s=max(0.0, (job.finished_at_ms - job.created_at_ms) / 1000),
        inter_token_s=None if inter_token_s is None else max(0.0, inter_token_s))
