"""Two coordinators on one PostgreSQL database: wake-ups cross between them through
LISTEN/NOTIFY, so streams need not poll the database (issue 27)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.hardware import ChipTier, HardwareReport
from contracts.ids import JobId
from contracts.models import ModelSpec
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from coordinator.live.notifier import Notifier, fleet_topic
from coordinator.live.pg_relay import PAYLOAD_CHARS_MAX, News, parse_payload, payloads
from coordinator.server import RunningCoordinator, start
from mlxnet.consumer import JobClient, StreamedTokens
from node_agent.coordinator_client import CoordinatorClient
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import job_pb2
from tests.conftest import fresh_postgres_database
from tests.node_registration import operator_key_for
from tests.proof_helpers import well_formed_commitment

PLAINTEXT = CoordinatorTrust(insecure=True)  # both coordinators serve plaintext on loopback
NEVER_S = 3600.0  # no poll within the test: only a relayed wake-up moves a stream
RELAY_UP_S = 30.0
STREAM_END_S = 60.0
MODEL = ModelSpec(model_id="fake/model", weights_bytes=10_000_000, parameter_count=2_500_000,
                  num_layers=4, num_attention_heads=4, num_kv_heads=2, head_dim=32,
                  max_context_tokens=2048, weights_digest="ab" * 32, vocab_size=256)
HARDWARE = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO,
                          memory_bytes=64 << 30, gpu_working_set_bytes=48 << 30, gpu_cores=20,
                          memory_bandwidth_gb_s=273.0, os_name="macOS (simulated)", simulated=True)
TOKENS = (11, 12, 13)


@pytest.fixture
def pair() -> Iterator[tuple[RunningCoordinator, RunningCoordinator]]:
    with fresh_postgres_database() as url:
        config = CoordinatorConfig(database_url=url, allow_anonymous=True,
                                   stream_poll_interval_s=NEVER_S, relayed_poll_interval_s=NEVER_S)
        first = start(config)
        second = start(config, migrate=False)
        try:
            assert all(c.service.notifier.wait_relayed(RELAY_UP_S) for c in (first, second))
            yield first, second
        finally:
            second.stop(grace_s=0)
            first.stop(grace_s=0)


def _receipt(identity, job_id: str) -> bytes:  # type: ignore[no-untyped-def]
    return encode_receipt(Receipt(
        job_id=JobId(job_id), node_id=identity.node_id, model_id=MODEL.model_id,
        weights_digest=MODEL.weights_digest, prompt_digest=prompt_digest("Hello there"),
        temperature=0.0, top_p=1.0, seed=0, max_tokens=8, output_digest=output_digest(TOKENS),
        prompt_tokens=3, completion_tokens=len(TOKENS), started_at_ms=1, finished_at_ms=2,
        finish_reason=FinishReason.END_TOKEN, first_token_at_ms=1,
        activation_commitment=well_formed_commitment(len(TOKENS))))


def test_a_consumer_on_one_coordinator_streams_a_job_run_by_a_node_on_the_other(
        tmp_path: Path, pair: tuple[RunningCoordinator, RunningCoordinator]) -> None:
    a, b = pair
    identity = load_or_create_identity(tmp_path / "node" / "identity.pem")
    node = CoordinatorClient(f"127.0.0.1:{b.port}", PLAINTEXT)
    node.register(identity, HARDWARE, (MODEL,), "alice", "node-on-b", 1,
                  operator_key=operator_key_for(b.service, "alice"))
    assignments = node.assignments()  # its stream is held by B
    with JobClient(f"127.0.0.1:{a.port}", trust=PLAINTEXT) as consumer:
        job = consumer.submit(MODEL.model_id, "Hello there", max_tokens=8)  # placed by A
        assert next(assignments).job_id == job.job_id  # A's commit woke B's stream
        items: list[StreamedTokens | job_pb2.Job] = []
        reader = threading.Thread(target=lambda: items.extend(consumer.stream(job.job_id)))
        reader.start()  # on A, which never polls: only B's relayed wake-ups move it
        node.stream_tokens(job.job_id, iter([(0, TOKENS[:2], "ab")]))
        node.stream_tokens(job.job_id, iter([(2, TOKENS[2:], "c")]))
        receipt = _receipt(identity, job.job_id)
        node.report_receipt(job.job_id, receipt, identity.sign(receipt))
        reader.join(STREAM_END_S)
        assert not reader.is_alive()
    assert "".join(i.text for i in items if isinstance(i, StreamedTokens)) == "abc"
    assert isinstance(items[-1], job_pb2.Job) and items[-1].status == job_pb2.JOB_STATUS_COMPLETED
    node.close()
    # Each coordinator timed the other's news on its bus-lag histogram, and says the bus is up.
    for coordinator in (a, b):
        exposition = coordinator.service.core.metrics.exposition().decode()
        assert "mlxnet:event_bus_up 1.0" in exposition
        count = next(line for line in exposition.splitlines()
                     if line.startswith("mlxnet:event_bus_lag_seconds_count"))
        assert float(count.split()[1]) >= 1


def test_payloads_stay_under_the_limit_and_carry_every_topic() -> None:
    topics = [f"job:job-{n:032x}" for n in range(1_000)]
    sent = payloads("origin", topics)
    assert len(sent) > 1 and all(len(p) <= PAYLOAD_CHARS_MAX for p in sent)
    assert [t for p in sent for t in p.split(" ")[1:]] == topics
    assert all(p.startswith("origin ") for p in sent)


def test_payloads_carry_their_publish_time_and_old_ones_are_read_without() -> None:
    [stamped] = payloads("origin@1700000000123456", ["job:1", "node:2"])
    assert parse_payload(stamped) == News("origin", 1700000000123456, ("job:1", "node:2"))
    assert parse_payload("origin job:1") == News("origin", None, ("job:1",))
    assert parse_payload("origin@notanumber job:1").published_us is None
    assert parse_payload("origin") == News("origin", None, ())


def test_losing_the_relay_wakes_every_waiter_to_poll_again() -> None:
    notifier = Notifier()
    notifier.set_relayed(True)
    assert notifier.poll_interval_s(1.0, 60.0) == 60.0

    async def wait_then_lose_the_relay() -> int:
        waiter = asyncio.create_task(notifier.wait_async("job:1", notifier.version("job:1"), 60.0))
        await asyncio.sleep(0)  # the waiter runs up to its wait: enlisted
        assert notifier.waiting() == 1
        notifier.set_relayed(False)
        return await asyncio.wait_for(waiter, 30.0)

    assert asyncio.run(wait_then_lose_the_relay()) == 1  # woken, with the topic moved on
    assert notifier.poll_interval_s(1.0, 60.0) == 1.0 and notifier.waiting() == 0


def test_a_node_that_registers_on_one_coordinator_is_placed_on_by_the_other_at_once(
        tmp_path: Path, pair: tuple[RunningCoordinator, RunningCoordinator]) -> None:
    a, b = pair
    nodes = {}
    for name, coordinator in (("on-a", a), ("on-b", b)):
        identity = load_or_create_identity(tmp_path / name / "identity.pem")
        client = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
        client.register(identity, HARDWARE, (MODEL,), "alice", name, 1,
                        operator_key=operator_key_for(coordinator.service, "alice"))
        nodes[name] = (identity.node_id, client)
    # B's registration reached A through the relay (not A's 60 s index rebuild).
    assert a.service.notifier.wait(fleet_topic(nodes["on-b"][0]), 0, RELAY_UP_S) > 0
    with JobClient(f"127.0.0.1:{a.port}", trust=PLAINTEXT) as consumer:
        placed = [consumer.submit(MODEL.model_id, "Hello there", max_tokens=8) for _ in range(2)]
    # Each node takes one job at a time: the second job goes to B's node at once, not to a queue.
    assert all(job.status == job_pb2.JOB_STATUS_ASSIGNED for job in placed)
    assert sorted(job.node_ids[0] for job in placed) == sorted(node_id for node_id, _ in nodes.values())
    for _, client in nodes.values():
        client.close()


def test_a_committed_chunk_travels_as_a_topic_unless_it_is_big_or_has_logprobs() -> None:
    from contracts.logprobs import TokenLogprob
    from coordinator.live.chunks import CHUNK_TOPIC_CHARS_MAX, chunk_of_topic, chunk_topic
    from coordinator.model import TokenChunk

    chunk = TokenChunk(7, (11, 12), "a b\nc ✓")
    topic = chunk_topic("job-1", chunk)
    assert topic is not None and " " not in topic and len(topic) <= CHUNK_TOPIC_CHARS_MAX
    assert chunk_of_topic(topic) == ("job-1", chunk)
    [payload] = payloads("origin@1", [topic, "job:job-1"])  # the chunk before its wake-up
    assert parse_payload(payload).topics == (topic, "job:job-1")
    assert chunk_topic("job-1", TokenChunk(0, (1,), "x" * 5_000)) is None
    assert chunk_topic("job-1", TokenChunk(0, (1,), "x", (TokenLogprob(-0.5),))) is None
    assert chunk_of_topic("job:job-1") is None and chunk_of_topic("chunk:not-base64!") is None
    assert chunk_of_topic("chunk:" + "e30=") is None  # "{}": no fields
