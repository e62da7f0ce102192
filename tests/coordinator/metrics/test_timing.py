"""A finished job's request figures, from its record alone."""

from __future__ import annotations

import dataclasses

import pytest

from contracts.ids import JobId
from coordinator.metrics.timing import finished_reason, finished_request
from coordinator.model import ERROR_CANCELLED, ERROR_STOP_SEQUENCE, JobRecord, JobStatus

JOB = JobRecord(job_id=JobId("j"), consumer_id="c", request_id=None, model_id="m", prompt="p",
                max_tokens=10, temperature=0.0, top_p=0.0, seed=0, min_decode_tokens_per_s=0.0,
                context_tokens=20, status=JobStatus.COMPLETED, created_at_ms=1_000,
                prompt_tokens=4, completion_tokens=10, assigned_at_ms=1_250, started_at_ms=1_500,
                finished_at_ms=2_400)


@pytest.mark.parametrize(("changes", "reason"), [
    ({}, "length"),
    ({"completion_tokens": 3}, "stop"),
    ({"status": JobStatus.FAILED, "error_code": ERROR_STOP_SEQUENCE}, "stop"),
    ({"status": JobStatus.FAILED, "error_code": ERROR_CANCELLED}, "abort"),
    ({"status": JobStatus.FAILED, "error_code": None}, "error"),
])
def test_finished_reasons_are_vllms(changes: dict, reason: str) -> None:
    assert finished_reason(dataclasses.replace(JOB, **changes)) == reason


def test_a_completed_jobs_timings() -> None:
    request = finished_request(JOB, streamed_tokens=0)
    assert (request.queue_s, request.first_token_s, request.e2e_s) == (0.25, 0.5, 1.4)
    assert request.generation_tokens == 10 and request.prompt_tokens == 4
    assert request.inter_token_s == pytest.approx(0.9 / 9)


def test_a_failed_job_counts_what_it_streamed_and_one_that_never_ran_has_no_first_token() -> None:
    cut = dataclasses.replace(JOB, status=JobStatus.FAILED, completion_tokens=0)
    assert finished_request(cut, streamed_tokens=5).generation_tokens == 5
    never = dataclasses.replace(cut, assigned_at_ms=None, started_at_ms=None)
    request = finished_request(never, streamed_tokens=0)
    assert request.first_token_s is None and request.queue_s is None and request.inter_token_s is None
