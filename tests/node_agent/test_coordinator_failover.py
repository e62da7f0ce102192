"""A node and a consumer given two coordinators carry on at the second when the first stops
(issue 27): the node's session and its running job move with it, the consumer's stream resumes
where it stopped, and the job is paid once. In process, over PostgreSQL, in plaintext."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from coordinator.server import RunningCoordinator, start
from ledger.book import transfers_for_job
from ledger.model import TransferKind
from mlxnet.consumer import JobClient, StreamedTokens
from node_agent.coordinator_client import CallRejected, CoordinatorClient, CoordinatorUnavailable
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import job_pb2
from tests.conftest import fresh_postgres_database
from tests.coordinator.live.test_pg_relay import HARDWARE, MODEL, TOKENS, _receipt
from tests.node_registration import operator_key_for

PLAINTEXT = CoordinatorTrust(insecure=True)
RELAY_UP_S = 30.0
STREAM_END_S = 60.0


@pytest.fixture
def pair() -> Iterator[tuple[RunningCoordinator, RunningCoordinator]]:
    with fresh_postgres_database() as url:
        config = CoordinatorConfig(database_url=url, allow_anonymous=True)
        first = start(config)
        second = start(config, migrate=False)
        stopped = []
        try:
            assert all(c.service.notifier.wait_relayed(RELAY_UP_S) for c in (first, second))
            yield first, second
        finally:
            for coordinator in (second, first):
                if coordinator not in stopped:
                    coordinator.stop(grace_s=0)
                    stopped.append(coordinator)


def test_a_node_and_a_consumer_fail_over_mid_job_and_the_job_is_paid_once(
        tmp_path: Path, pair: tuple[RunningCoordinator, RunningCoordinator]) -> None:
    a, b = pair
    both = f"127.0.0.1:{a.port},127.0.0.1:{b.port}"
    identity = load_or_create_identity(tmp_path / "node" / "identity.pem")
    node = CoordinatorClient(both, PLAINTEXT)
    assert node.address == f"127.0.0.1:{a.port}"
    node.register(identity, HARDWARE, (MODEL,), "alice", "node", 1,
                  operator_key=operator_key_for(a.service, "alice"))
    assignments = node.assignments()
    consumer = JobClient(both, trust=PLAINTEXT)
    job = consumer.submit(MODEL.model_id, "Hello there", max_tokens=8)
    assert next(assignments).job_id == job.job_id
    items: list[StreamedTokens | job_pb2.Job] = []
    first_token = threading.Event()

    def read() -> None:
        for item in consumer.stream(job.job_id):
            items.append(item)
            first_token.set()

    reader = threading.Thread(target=read)
    reader.start()
    node.stream_tokens(job.job_id, iter([(0, TOKENS[:2], "ab")]))
    assert first_token.wait(STREAM_END_S)

    a.stop(grace_s=0)  # the coordinator both were speaking to goes away mid-job
    with pytest.raises(CoordinatorUnavailable):
        next(assignments)
    node.fail_over()
    assert node.address == f"127.0.0.1:{b.port}"
    # The same session, the same attempt: no new registration, so the job is not handed back.
    node.stream_tokens(job.job_id, iter([(0, TOKENS[:2], "ab"), (2, TOKENS[2:], "c")]))
    receipt = _receipt(identity, job.job_id)
    assert node.report_receipt(job.job_id, receipt, identity.sign(receipt)) > 0
    with pytest.raises(CallRejected):  # a retry whose first answer was lost: not paid again
        node.report_receipt(job.job_id, receipt, identity.sign(receipt))
    reader.join(STREAM_END_S)
    assert not reader.is_alive()

    streamed = [i for i in items if isinstance(i, StreamedTokens)]
    assert "".join(i.text for i in streamed) == "abc"
    assert [t for i in streamed for t in i.token_ids] == list(TOKENS)
    assert isinstance(items[-1], job_pb2.Job) and items[-1].status == job_pb2.JOB_STATUS_COMPLETED
    assert consumer.address == f"127.0.0.1:{b.port}"
    b.service.money.post_completions()  # the receipt queued its credit; post it now, not at the loop's next pass
    with b.service.db.read_transaction() as session:
        kinds = [t.kind for t in transfers_for_job(session, job.job_id)]
    # An anonymous consumer: the network pays, so the operator's credit is the job's one transfer.
    assert kinds == [TransferKind.JOB_OPERATOR_CREDIT]
    consumer.close()
    node.close()
