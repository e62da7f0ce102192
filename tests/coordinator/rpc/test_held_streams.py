"""Streams a stranger holds open: bounded per session, per caller and in total, and never
in the way of heartbeats, registrations or unary calls (issue 25: 140 held streams stalled
a coordinator with 128 worker threads)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from contracts.hardware import ChipTier, HardwareReport
from contracts.models import ModelSpec
from contracts.tls import CoordinatorTrust
from coordinator.service import VERIFICATION_TOPIC
from coordinator.config import CoordinatorConfig
from coordinator.rpc.stream_limits import StreamLimits
from coordinator.server import RunningCoordinator, start
from mlxnet.consumer import JobClient, JobRequestError
from node_agent.coordinator_client import CoordinatorClient
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc
from tests.node_registration import bind_channel

PLAINTEXT = CoordinatorTrust(insecure=True)  # the coordinator here serves plaintext on loopback
MODEL = ModelSpec(model_id="fake/model", weights_bytes=10_000_000, parameter_count=2_500_000,
                  num_layers=4, num_attention_heads=4, num_kv_heads=2, head_dim=32,
                  max_context_tokens=2048, weights_digest="ab" * 32, vocab_size=256)
HARDWARE = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO,
                          memory_bytes=64 << 30, gpu_working_set_bytes=48 << 30, gpu_cores=20,
                          memory_bandwidth_gb_s=273.0, os_name="macOS (simulated)", simulated=True)
HELD_STREAMS = 140  # more than the 128 worker threads the old server had
LIMITS = StreamLimits(assignment_streams_per_node=4, job_streams_per_consumer=3)
CALL_DEADLINE_S = 20.0  # a bound on a stalled server, not a latency figure
OPEN_WAIT_S = 60.0


@pytest.fixture
def coordinator(database_url: str) -> Iterator[RunningCoordinator]:
    running = start(CoordinatorConfig(database_url=database_url, allow_anonymous=True),
                    stream_limits=LIMITS)
    try:
        yield running
    finally:
        running.stop(grace_s=0)


def _registered(tmp_path: Path, address: str, name: str) -> CoordinatorClient:
    client = CoordinatorClient(address, PLAINTEXT)
    client.register(load_or_create_identity(tmp_path / name / "identity.pem"), HARDWARE, (MODEL,),
                    "", name, 1)  # each its own operator: an unproven name is refused
    return client


def _hold_assignments(stub: node_pb2_grpc.NodeServiceStub, client: CoordinatorClient):  # type: ignore[no-untyped-def]
    """An open ReceiveAssignments call, never read: the server holds the stream."""
    return stub.ReceiveAssignments(node_pb2.ReceiveAssignmentsRequest(),
                                   metadata=client._metadata())  # its token


def test_held_streams_never_stall_heartbeats_registrations_or_calls(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    address = f"127.0.0.1:{coordinator.port}"
    sessions = [_registered(tmp_path, address, f"mallory-{i}")
                for i in range(HELD_STREAMS // LIMITS.assignment_streams_per_node)]
    with grpc.insecure_channel(address) as channel:
        for client in sessions:  # the attacker's one connection, bound to each session by its key
            bind_channel(channel, client._identity, client.session_token)  # type: ignore[arg-type]
        stub = node_pb2_grpc.NodeServiceStub(channel)
        held = [_hold_assignments(stub, client)
                for client in sessions for _ in range(LIMITS.assignment_streams_per_node)]
        try:
            assert coordinator.server.streams.wait_for("ReceiveAssignments",
                                                       lambda n: n == HELD_STREAMS, OPEN_WAIT_S)
            honest = _registered(tmp_path, address, "honest")  # a Register goes through
            for _ in range(5):
                honest.heartbeat(0)  # each within the client's deadline
            honest.close()  # and its heartbeat stream with it
            with JobClient(address, trust=PLAINTEXT) as consumer:
                with pytest.raises(JobRequestError) as answered:
                    consumer.get("job-none")
            assert answered.value.code == "NOT_FOUND"
            # One session more than its share: refused, and the others stay open.
            extra = _hold_assignments(stub, sessions[0])
            with pytest.raises(grpc.RpcError) as refused:
                next(extra)
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "4 ReceiveAssignments streams are open" in (refused.value.details() or "")
            assert coordinator.server.streams.count("ReceiveAssignments") == HELD_STREAMS
        finally:
            for call in held:
                call.cancel()
            for client in sessions:
                client.close()
    # Cancelled, every stream gives its slot back and stops waiting for wake-ups (the peer-check
    # loop waits on the verification topic throughout: it is no stream).
    assert coordinator.server.streams.wait_for(None, lambda n: n == 0, OPEN_WAIT_S)
    assert coordinator.service.notifier.waiting(besides=frozenset({VERIFICATION_TOPIC})) == 0


def test_one_caller_holds_at_most_its_share_of_job_streams(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    address = f"127.0.0.1:{coordinator.port}"
    node = _registered(tmp_path, address, "server")
    with JobClient(address, trust=PLAINTEXT) as consumer:
        job = consumer.submit(MODEL.model_id, "In the beginning", max_tokens=4)
    with grpc.insecure_channel(address) as channel:
        stub = job_pb2_grpc.JobServiceStub(channel)
        request = job_pb2.StreamJobRequest(job_id=job.job_id)
        held = [stub.StreamJob(request) for _ in range(LIMITS.job_streams_per_consumer)]
        try:
            assert coordinator.server.streams.wait_for("StreamJob", lambda n: n == len(held), OPEN_WAIT_S)
            with pytest.raises(grpc.RpcError) as refused:
                next(stub.StreamJob(request))
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert dict(refused.value.trailing_metadata() or ()).get("retry-after") == "5"
        finally:
            for call in held:
                call.cancel()
    assert coordinator.server.streams.wait_for(None, lambda n: n == 0, OPEN_WAIT_S)
    node.close()


def _ended(calls: list, count: int) -> list:  # type: ignore[type-arg]
    """The calls that ended, once count of them have (or after OPEN_WAIT_S)."""
    deadline = time.monotonic() + OPEN_WAIT_S
    while sum(1 for call in calls if call.done()) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return [call for call in calls if call.done()]


BURST_STREAMS = 2_500  # well past gRPC's default of 1,000 calls waiting to be taken up
BURST_LIMITS = StreamLimits(job_streams_per_consumer=2_000, streams_total=2_000)


def test_a_burst_of_streams_waits_its_turn_and_only_our_limit_refuses(
        tmp_path: Path, database_url: str) -> None:
    """Opened at once on one connection, every stream under the limit opens; those over it are
    refused with RESOURCE_EXHAUSTED naming the limit. None ends with a bare CANCELLED, which
    gRPC's own queue gave at random past 1,000 waiting calls (issues 25 and 27)."""
    running = start(CoordinatorConfig(database_url=database_url, allow_anonymous=True),
                    stream_limits=BURST_LIMITS)
    address = f"127.0.0.1:{running.port}"
    try:
        node = _registered(tmp_path, address, "server")  # takes the job, and never runs it
        with JobClient(address, trust=PLAINTEXT) as consumer:
            job = consumer.submit(MODEL.model_id, "In the beginning", max_tokens=4)
        with grpc.insecure_channel(address) as channel:
            stub = job_pb2_grpc.JobServiceStub(channel)
            request = job_pb2.StreamJobRequest(job_id=job.job_id)
            burst = [stub.StreamJob(request) for _ in range(BURST_STREAMS)]
            try:
                refused = BURST_STREAMS - BURST_LIMITS.streams_total
                _ended(burst, refused)
                assert running.server.streams.wait_for(
                    "StreamJob", lambda n: n == BURST_LIMITS.streams_total, OPEN_WAIT_S)
                ended = [call for call in burst if call.done()]
                assert [(call.code(), call.details()) for call in ended] == [
                    (grpc.StatusCode.RESOURCE_EXHAUSTED,
                     "the coordinator holds 2000 streams, its limit; try again later")] * refused
                assert running.server.streams.count("StreamJob") == BURST_LIMITS.streams_total
            finally:
                for call in burst:
                    call.cancel()
        assert running.server.streams.wait_for(None, lambda n: n == 0, OPEN_WAIT_S)
        node.close()
    finally:
        running.stop(grace_s=0)
