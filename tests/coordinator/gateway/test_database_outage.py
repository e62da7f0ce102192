"""A database outage answers errors a client can act on: 503 with Retry-After on HTTP,
UNAVAILABLE on gRPC, never a bare 500 or UNKNOWN; health follows the background loops, and a
job's reader outlives the outage (issue 28, item 4)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from coordinator.errors import DatabaseUnavailable
from coordinator.model import JobStatus, TokenChunk
from coordinator.server import RunningCoordinator, start
from coordinator.service import JobView
from mlxnet.consumer import JobClient, JobRequestError
from node_agent.identity import load_or_create_identity
from tests.conftest import fresh_postgres_database
from tests.coordinator.gateway.service_harness import make_service, new_consumer, register_node
from tests.coordinator.outage import database_outage

WAIT_S = 60.0


@pytest.fixture
def coordinator() -> Iterator[RunningCoordinator]:
    with fresh_postgres_database() as url:
        running = start(CoordinatorConfig(database_url=url, allow_anonymous=True,
                                          heartbeat_interval_ms=50, stream_poll_interval_s=0.2),
                        http_port=0)
        try:
            yield running
        finally:
            running.stop(grace_s=0)


def _health_is(coordinator: RunningCoordinator, healthy: bool) -> None:
    flipped = threading.Event()
    coordinator.service.health.on_change(lambda now: flipped.set() if now is healthy else None)
    assert flipped.wait(WAIT_S), f"health never became {healthy}"


def test_http_and_grpc_answer_retryable_errors_while_the_database_is_away(
        coordinator: RunningCoordinator) -> None:
    assert coordinator.gateway is not None
    base = f"http://127.0.0.1:{coordinator.gateway.port}"
    address = f"127.0.0.1:{coordinator.port}"
    body = {"model": "test/none", "prompt": "Hi", "max_tokens": 4}
    with httpx.Client(base_url=base, timeout=WAIT_S) as http, \
            grpc.insecure_channel(address) as channel, \
            JobClient(address, trust=CoordinatorTrust(insecure=True)) as client:
        assert http.get("/healthz").status_code == 200
        with database_outage(coordinator.service.db.url):
            _health_is(coordinator, False)
            health = http.get("/healthz")
            assert health.status_code == 503 and health.headers["retry-after"]
            assert any(not loop["healthy"] for loop in health.json()["loops"])
            answer = http.post("/v1/completions", json=body)
            assert answer.status_code == 503 and int(answer.headers["retry-after"]) > 0
            assert answer.json()["error"]["code"] == "database_unavailable"
            check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""),
                                                              timeout=WAIT_S)
            assert check.status == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(JobRequestError) as refused:
                client.get("job-that-cannot-be-read")
            assert refused.value.code == "UNAVAILABLE"
        _health_is(coordinator, True)
        assert http.get("/healthz").status_code == 200


def test_a_jobs_reader_outlives_a_database_outage(tmp_path: Path) -> None:
    """Issue 28: gateway job threads died on database errors and the client got a bare 500."""
    with fresh_postgres_database() as url:
        service = make_service(url, stream_poll_interval_s=0.05)
        try:
            node = register_node(service, load_or_create_identity(tmp_path / "node.pem"), 4)
            consumer = new_consumer(service, "acme")
            job = service.jobs.submit(consumer.submission(max_tokens=40), consumer.caller).job
            read: list[TokenChunk | JobView] = []
            failures: list[BaseException] = []
            finished = threading.Event()
            stop_reading = threading.Event()

            def reader() -> None:
                try:
                    read.extend(service.jobs.stream(job.job_id, lambda: not stop_reading.is_set(),
                                                    consumer.caller))
                except BaseException as error:  # noqa: BLE001 (the test reports it below)
                    failures.append(error)
                finally:
                    finished.set()

            thread = threading.Thread(target=reader)
            thread.start()
            with database_outage(url):
                with pytest.raises(DatabaseUnavailable):
                    service.jobs.get(job.job_id)
                service.notifier.notify(f"job:{job.job_id}")  # the reader reads, and fails
            service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, (1, 2), "ab"), prompt_tokens=3)
            service.jobs.cancel(job.job_id, consumer.caller)
            assert finished.wait(WAIT_S)
            stop_reading.set()
            thread.join(WAIT_S)
            assert failures == []
            assert [item.token_ids for item in read if isinstance(item, TokenChunk)] == [(1, 2)]
            final = read[-1]
            assert isinstance(final, JobView) and final.job.status is JobStatus.FAILED
        finally:
            service.db.dispose()

