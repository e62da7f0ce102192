"""Hostile gRPC requests against a real coordinator on loopback: each is refused at the edge
with INVALID_ARGUMENT naming the field and the limit, nothing of it is stored, and the
coordinator goes on serving (the infinite-bandwidth registration used to take it down)."""

from __future__ import annotations

import logging
import math
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from sqlalchemy import func, select

from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from coordinator.server import RunningCoordinator, start
from coordinator.storage.tables import node_benchmarks, nodes
from node_agent.coordinator_client import CoordinatorClient
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import common_pb2, job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc
from tests.node_registration import bind_channel
from tests.coordinator.rpc.test_node_protocol import HARDWARE, MODEL

PLAINTEXT = CoordinatorTrust(insecure=True)  # the coordinator here serves plaintext on loopback
DETAILS_CHARS_MAX = 2_000  # a refusal's message is about the field, never a copy of the input


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    running = start(CoordinatorConfig(database_url=f"sqlite:///{tmp_path / 'coordinator.db'}",
                                      allow_anonymous=True), http_port=0)
    try:
        yield running
    finally:
        running.stop(grace_s=0)


@pytest.fixture
def channel(coordinator: RunningCoordinator) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{coordinator.port}", options=[
            ("grpc.max_send_message_length", 8 << 20)]) as opened:
        yield opened


def _hardware(**changes: object) -> node_pb2.Hardware:
    fields: dict[str, object] = dict(
        chip="Apple M4 Pro", chip_family="M4", chip_tier="pro", memory_bytes=64 << 30,
        gpu_working_set_bytes=48 << 30, gpu_cores=20, memory_bandwidth_gb_s=273.0,
        os_name="macOS 26.2")
    return node_pb2.Hardware(**{**fields, **changes})


def _refusal(call, request, metadata=()) -> grpc.RpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as refused:
        call(request, metadata=metadata, timeout=30)
    return refused.value  # type: ignore[return-value]


def _node_rows(coordinator: RunningCoordinator) -> int:
    with coordinator.service.db.transaction() as session:
        return session.execute(select(func.count()).select_from(nodes)).scalar_one()


def _fleet_status(coordinator: RunningCoordinator) -> int:
    assert coordinator.gateway is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{coordinator.gateway.port}/world/api/fleet") as r:
        return r.status


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e6, 5e-324, -1.0])
def test_a_registration_with_an_impossible_bandwidth_is_refused_and_not_stored(
        coordinator: RunningCoordinator, channel: grpc.Channel, value: float) -> None:
    stub = node_pb2_grpc.NodeServiceStub(channel)
    refused = _refusal(stub.Register, node_pb2.RegisterRequest(
        hardware=_hardware(memory_bandwidth_gb_s=value)))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.details().startswith("hardware.memory_bandwidth_gb_s must be ")
    assert "0 or from 0.01 to 10000" in refused.details()
    assert _node_rows(coordinator) == 0
    assert _fleet_status(coordinator) == 200


def test_a_heartbeat_with_an_infinite_benchmark_is_refused_and_heartbeats_go_on(
        tmp_path: Path, coordinator: RunningCoordinator, channel: grpc.Channel) -> None:
    client = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
    identity = load_or_create_identity(tmp_path / "id.pem")
    client.register(identity, HARDWARE, (MODEL,), identity.node_id, "n", 1)  # its own operator: no key
    bind_channel(channel, identity, client.session_token)  # the test's own connection
    session = client._metadata()
    stub = node_pb2_grpc.NodeServiceStub(channel)
    benchmark = node_pb2.Benchmark(memory_bandwidth_gb_s=math.inf, decode_tokens_per_s=10,
                                   prefill_tokens_per_s=100, reference_model="tiny",
                                   reference_weights_bytes=1 << 20, measured_at_ms=1, run_time_ms=5)
    refused = _refusal(stub.Heartbeat, node_pb2.HeartbeatRequest(benchmark=benchmark), session)
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.details().startswith("benchmark.memory_bandwidth_gb_s must be a finite number")
    with coordinator.service.db.transaction() as db_session:
        assert db_session.execute(select(func.count()).select_from(node_benchmarks)).scalar_one() == 0
    client.heartbeat(0)  # the node's session still works, and so does every read
    assert _fleet_status(coordinator) == 200
    with grpc.insecure_channel(f"127.0.0.1:{coordinator.port}") as other:
        placement = job_pb2_grpc.JobServiceStub(other).ExplainPlacement(
            job_pb2.ExplainPlacementRequest(model=MODEL.model_id, context_tokens=64), timeout=30)
    assert placement.placeable
    client.close()


@pytest.mark.parametrize(("points", "refusal"), [
    (((2, 50.0), (1, 10.0)), "batch_decode sizes ascending"),  # out of order
    (((1, 10.0), (1, 12.0)), "batch_decode sizes ascending"),  # a size twice
    (((1, 10.0), (0, 12.0)), "batch_decode sizes ascending"),  # 0 is proto's unset: the figures' own check
    (((1, 10.0), (300, 12.0)), "benchmark.batch_decode[1].batch_size must be from 1 to 256"),
    (((1, 10.0), (2, math.inf)), "benchmark.batch_decode[1].tokens_per_s must be a finite number"),
    (((1, 10.0), (2, -3.0)), "benchmark.batch_decode[1].tokens_per_s must be from 0.001"),
])
def test_a_benchmark_with_impossible_batch_figures_is_refused_naming_them(
        tmp_path: Path, coordinator: RunningCoordinator, channel: grpc.Channel, points, refusal: str) -> None:
    client = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
    identity = load_or_create_identity(tmp_path / "id.pem")
    client.register(identity, HARDWARE, (MODEL,), identity.node_id, "n", 1)
    benchmark = node_pb2.Benchmark(memory_bandwidth_gb_s=100, decode_tokens_per_s=10, prefill_tokens_per_s=100,
                                   reference_model="tiny", reference_weights_bytes=1 << 20, measured_at_ms=1,
                                   run_time_ms=5, batch_decode=[node_pb2.BatchDecode(batch_size=size, tokens_per_s=rate)
                                                                for size, rate in points])
    bind_channel(channel, identity, client.session_token)  # the test's own connection
    stub = node_pb2_grpc.NodeServiceStub(channel)
    refused = _refusal(stub.Heartbeat, node_pb2.HeartbeatRequest(benchmark=benchmark), client._metadata())
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT and refusal in refused.details()
    with coordinator.service.db.transaction() as db_session:
        assert db_session.execute(select(func.count()).select_from(node_benchmarks)).scalar_one() == 0
    client.close()


@pytest.mark.parametrize(("request_message", "field", "limit"), [
    (node_pb2.RegisterRequest(hardware=_hardware(), models=[common_pb2.ModelSpec(
        model_id="m" * 3_900_000)]), "models[0].model_id is 3900000 characters", "the limit is 512"),
    (node_pb2.RegisterRequest(hardware=_hardware(chip="c" * (1 << 20))),
     "hardware.chip is 1048576 characters", "the limit is 128"),
    (node_pb2.RegisterRequest(hardware=_hardware(gpu_cores=-7)), "hardware.gpu_cores must be from 0 to 1024",
     "got -7"),
    (node_pb2.RegisterRequest(hardware=_hardware(thunderbolt_links=[
        node_pb2.ThunderboltLink(port=f"bus_{n}") for n in range(50_000)])),
     "hardware.thunderbolt_links holds 50000 items", "the limit is 32"),
    (node_pb2.RegisterRequest(hardware=_hardware(chip="Apple M4\n2026-12-06 INFO forged line")),
     "hardware.chip must not hold control characters", "line breaks"),
])
def test_oversized_and_negative_registrations_are_refused_naming_field_and_limit(
        coordinator: RunningCoordinator, channel: grpc.Channel, caplog: pytest.LogCaptureFixture,
        request_message: node_pb2.RegisterRequest, field: str, limit: str) -> None:
    with caplog.at_level(logging.INFO):
        refused = _refusal(node_pb2_grpc.NodeServiceStub(channel).Register, request_message)
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in refused.details() and limit in refused.details()
    assert len(refused.details()) < DETAILS_CHARS_MAX
    assert _node_rows(coordinator) == 0
    assert all(len(record.getMessage()) < DETAILS_CHARS_MAX and "forged" not in record.getMessage()
               for record in caplog.records)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_explain_placement_refuses_numbers_that_are_not_finite(
        channel: grpc.Channel, value: float) -> None:
    refused = _refusal(job_pb2_grpc.JobServiceStub(channel).ExplainPlacement,
                       job_pb2.ExplainPlacementRequest(model="m", min_decode_tokens_per_s=value))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.details().startswith("min_decode_tokens_per_s must be a finite number from 0 to")


# (method, the tag of one of its string fields)
_METHODS = [("/mlxnet.v1.JobService/GetJob", 0x0A), ("/mlxnet.v1.NodeService/Register", 0x32),
            ("/mlxnet.v1.JobService/StreamJob", 0x0A)]


@pytest.mark.parametrize(("method", "string_tag"), _METHODS)
@pytest.mark.parametrize("payload", [b"\x03\xed\xa0\x80", b"\xff\xff\xff\xff", b"\x7f"])
def test_bytes_that_are_no_message_get_invalid_argument_not_internal(
        channel: grpc.Channel, method: str, string_tag: int, payload: bytes) -> None:
    """Invalid UTF-8 in a string (a lone surrogate's bytes, 0xff), or a length past the end:
    grpc alone answers INTERNAL ("Exception deserializing request")."""
    payload = bytes([string_tag]) + payload
    if method.endswith("StreamJob"):
        call = channel.unary_stream(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as refused:
            list(call(payload, timeout=30))
    else:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as refused:
            call(payload, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "not a valid protobuf message" in refused.value.details()  # type: ignore[attr-defined]


def test_a_streamed_chunk_out_of_bounds_is_refused(
        tmp_path: Path, coordinator: RunningCoordinator, channel: grpc.Channel) -> None:
    client = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
    identity = load_or_create_identity(tmp_path / "id.pem")
    client.register(identity, HARDWARE, (MODEL,), identity.node_id, "n", 1)  # its own operator: no key
    bind_channel(channel, identity, client.session_token)  # the test's own connection
    stub = node_pb2_grpc.NodeServiceStub(channel)
    chunk = node_pb2.StreamTokensRequest(job_id="job-x", first_index=-5, token_ids=[1])
    with pytest.raises(grpc.RpcError) as refused:
        stub.StreamTokens(iter([chunk]), metadata=client._metadata(), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "first_index must be from 0 to" in refused.value.details()  # type: ignore[attr-defined]
    client.close()
