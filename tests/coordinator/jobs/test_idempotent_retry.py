"""A retry with the same request id (HTTP's Idempotency-Key): a job that failed for a reason a
retry need not repeat runs again as a new attempt; anything else is returned as it is (issue
28, item 5: a retry could never recover a failed job)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.receipts import FinishReason
from coordinator.model import JobStatus, TokenChunk
from coordinator.service import CoordinatorService
from node_agent.identity import Identity, load_or_create_identity
from tests.coordinator.gateway.service_harness import MODEL, make_service, new_consumer, register_node
from tests.proof_helpers import signed_receipt

KEY = "order-66"


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    service = make_service(database_url)
    yield service
    service.db.dispose()


@pytest.fixture
def identity(tmp_path: Path) -> Identity:
    return load_or_create_identity(tmp_path / "node.pem")


def test_a_retry_after_a_fault_starts_a_new_attempt_and_its_retry_returns_that(
        service: CoordinatorService, identity: Identity) -> None:
    node = register_node(service, identity, 4)
    consumer = new_consumer(service, "acme")
    first = service.jobs.submit(consumer.submission(max_tokens=40, request_id=KEY), consumer.caller).job
    service.nodes.accept_tokens(node, first.job_id, TokenChunk(0, (1, 2), "ab"), prompt_tokens=3)
    service.clock.ms += service.config.node_offline_after_ms + 1  # type: ignore[attr-defined]
    service.nodes.reap_offline()  # the node died mid-stream
    assert service.jobs.get(first.job_id).job.status is JobStatus.FAILED

    node = register_node(service, identity, 4)  # it came back
    retry = service.jobs.submit(consumer.submission(max_tokens=40, request_id=KEY), consumer.caller).job
    assert retry.job_id != first.job_id and retry.status is JobStatus.ASSIGNED
    again = service.jobs.submit(consumer.submission(max_tokens=40, request_id=KEY), consumer.caller).job
    assert again.job_id == retry.job_id  # the new attempt is the request's job now
    tokens = (5, 6, 7)
    service.nodes.accept_tokens(node, retry.job_id, TokenChunk(0, tokens, "xyz"), prompt_tokens=3)
    receipt = signed_receipt(identity, retry, tokens, 3, MODEL.weights_digest, service.clock.now_ms(),
                             FinishReason.END_TOKEN)
    service.nodes.accept_receipt(node, retry.job_id, receipt.body, receipt.signature)
    done = service.jobs.submit(consumer.submission(max_tokens=40, request_id=KEY), consumer.caller)
    assert done.job.job_id == retry.job_id and done.job.status is JobStatus.COMPLETED
    assert service.jobs.get(first.job_id).job.status is JobStatus.FAILED  # the first stays as it was


def test_a_retry_after_a_failure_it_would_repeat_returns_the_failure(
        service: CoordinatorService, identity: Identity) -> None:
    node = register_node(service, identity, 4)
    consumer = new_consumer(service, "acme")
    first = service.jobs.submit(consumer.submission(max_tokens=40, request_id=KEY), consumer.caller).job
    service.nodes.accept_failure(node, first.job_id, "prompt is 9000 tokens", "prompt_too_long")
    retry = service.jobs.submit(consumer.submission(max_tokens=40, request_id=KEY), consumer.caller).job
    assert retry.job_id == first.job_id and retry.status is JobStatus.FAILED


def test_a_retry_after_a_cancel_runs_again(service: CoordinatorService, identity: Identity) -> None:
    register_node(service, identity, 4)
    consumer = new_consumer(service, "acme")
    first = service.jobs.submit(consumer.submission(max_tokens=40, request_id=KEY), consumer.caller).job
    service.jobs.cancel(first.job_id, consumer.caller)  # or the client went away
    retry = service.jobs.submit(consumer.submission(max_tokens=40, request_id=KEY), consumer.caller).job
    assert retry.job_id != first.job_id and retry.status is JobStatus.ASSIGNED


def test_a_request_id_runs_again_a_bounded_number_of_times(
        service: CoordinatorService, identity: Identity) -> None:
    from coordinator.jobs.submission import ATTEMPTS_PER_REQUEST_MAX

    register_node(service, identity, ATTEMPTS_PER_REQUEST_MAX + 1)
    consumer = new_consumer(service, "acme", deposit_mlx=100)
    seen = []
    for _ in range(ATTEMPTS_PER_REQUEST_MAX):
        job = service.jobs.submit(consumer.submission(max_tokens=8, request_id=KEY), consumer.caller).job
        assert job.job_id not in seen
        seen.append(job.job_id)
        service.jobs.cancel(job.job_id, consumer.caller)
    last = service.jobs.submit(consumer.submission(max_tokens=8, request_id=KEY), consumer.caller).job
    assert last.job_id == seen[-1] and last.status is JobStatus.FAILED
