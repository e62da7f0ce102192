"""Leases, not guesses: a restarted coordinator gives every node the offline limit to
reconnect, and a node that does keeps its jobs (issue 28, item 1)."""

from __future__ import annotations

from pathlib import Path

from coordinator.model import JobStatus, TokenChunk
from coordinator.service import CoordinatorService
from node_agent.identity import load_or_create_identity
from contracts.receipts import FinishReason
from tests.coordinator.gateway.service_harness import (
    MODEL,
    FakeClock,
    make_service,
    new_consumer,
    register_node,
)
from tests.proof_helpers import signed_receipt


def _restarted(service: CoordinatorService, outage_ms: int) -> CoordinatorService:
    """The same database, a new coordinator process whose clock is outage_ms later."""
    clock = FakeClock()
    clock.ms = service.clock.now_ms() + outage_ms
    again = make_service(service.db.url)
    again.core.clock = again.clock = clock
    again.core.started_at_ms = clock.ms
    return again


def test_a_restart_longer_than_the_offline_limit_hands_back_nothing_before_the_grace(
        database_url: str, tmp_path: Path) -> None:
    """Issue 28: after an outage of ~8 s the reaper failed a live node's streamed job and
    re-queued its unstarted one, which then completed on two nodes."""
    first = make_service(database_url)
    identity = load_or_create_identity(tmp_path / "node.pem")
    node = register_node(first, identity, 4)
    consumer = new_consumer(first, "acme")
    streamed = first.jobs.submit(consumer.submission(max_tokens=40), consumer.caller).job
    unstarted = first.jobs.submit(consumer.submission(max_tokens=40), consumer.caller).job
    first.nodes.accept_tokens(node, streamed.job_id, TokenChunk(0, (1, 2), "ab"), prompt_tokens=3)
    first.db.dispose()

    limit = first.config.node_offline_after_ms
    service = _restarted(first, outage_ms=limit * 3)
    try:
        assert service.nodes.reap_offline() == []  # within the grace, whatever the old heartbeats say
        service.clock.ms += limit // 2  # type: ignore[attr-defined]
        service.nodes.heartbeat(node, 2)  # the node reconnected
        service.clock.ms += limit // 2 + 1  # type: ignore[attr-defined]  # the grace is over
        assert service.nodes.reap_offline() == []  # its lease was renewed
        for job in (streamed, unstarted):
            view = service.jobs.get(job.job_id).job
            assert view.status in (JobStatus.ASSIGNED, JobStatus.RUNNING) and view.attempt == 1
        # It finishes the streamed job: its receipt is accepted, once.
        tokens = (1, 2, 3)
        service.nodes.accept_tokens(node, streamed.job_id, TokenChunk(2, (3,), "c"), attempt=1)
        final = signed_receipt(identity, streamed, tokens, 3, MODEL.weights_digest,
                               service.clock.now_ms(), FinishReason.END_TOKEN)
        result = service.nodes.accept_receipt(node, streamed.job_id, final.body, final.signature,
                                              attempt=1)
        assert result.credited_base_units > 0
        assert service.jobs.get(streamed.job_id).job.status is JobStatus.COMPLETED
    finally:
        service.db.dispose()


def test_a_node_that_never_comes_back_is_reaped_once_the_grace_is_over(
        database_url: str, tmp_path: Path) -> None:
    first = make_service(database_url)
    register_node(first, load_or_create_identity(tmp_path / "node.pem"), 4)
    consumer = new_consumer(first, "acme")
    job = first.jobs.submit(consumer.submission(max_tokens=40), consumer.caller).job
    first.db.dispose()
    limit = first.config.node_offline_after_ms
    service = _restarted(first, outage_ms=limit * 3)
    try:
        assert service.nodes.reap_offline() == []
        service.clock.ms += limit + 1  # type: ignore[attr-defined]
        assert service.nodes.reap_offline() == [job.job_id]
        again = service.jobs.get(job.job_id).job
        assert again.status is JobStatus.QUEUED
    finally:
        service.db.dispose()
