"""Signed heartbeats, lending state, benchmarks, hand-back and leaving, against a real coordinator.

The node side is played with the agent's own gRPC client on loopback, on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from contracts.benchmarks import BenchmarkResult
from contracts.hardware import ChipTier, HardwareReport
from contracts.lending import Heartbeat, LendingMode, LendingState, heartbeat_message
from contracts.models import ModelSpec
from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from contracts.signing import signature_is_valid
from coordinator.model import JobStatus, NodeRecord, TokenChunk, UptimeSpan
from coordinator.scheduling.fleet_reads import snapshot
from coordinator.server import RunningCoordinator, start
from coordinator.storage import job_rows, liveness_rows, node_rows
from mlxnet.consumer import JobClient
from node_agent.coordinator_client import CallRejected, CoordinatorClient, NodeStatus
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import Identity, load_or_create_identity
from protos.mlxnet.v1 import job_pb2, node_pb2

PLAINTEXT = CoordinatorTrust(insecure=True)  # the coordinator here serves plaintext on loopback

MODEL = ModelSpec(model_id="fake/model", weights_bytes=10_000_000, parameter_count=2_500_000,
                  num_layers=4, num_attention_heads=4, num_kv_heads=4, head_dim=64,
                  max_context_tokens=2048, weights_digest="ab" * 32, vocab_size=32_000)
ULTRA = simulated_profile("m3-ultra-512")
MINI = simulated_profile("m4-pro-64")


@pytest.fixture
def coordinator(database_url: str) -> Iterator[RunningCoordinator]:
    running = start(CoordinatorConfig(database_url=database_url, stream_poll_interval_s=0.2,
                                      allow_anonymous=True))
    try:
        yield running
    finally:
        running.stop(grace_s=0)


def _join(tmp_path: Path, coordinator: RunningCoordinator, name: str, hardware: HardwareReport,
          status: NodeStatus | None = None) -> tuple[Identity, CoordinatorClient]:
    identity = load_or_create_identity(tmp_path / name / "identity.pem")
    client = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
    client.register(identity, hardware, (MODEL,), "", name, 1, status)
    return identity, client


def _node(coordinator: RunningCoordinator, identity: Identity) -> NodeRecord:
    with coordinator.service.db.transaction() as session:
        node = node_rows.node_by_id(session, identity.node_id)
    assert node is not None
    return node


def _spans(coordinator: RunningCoordinator, identity: Identity,
           modes: frozenset[LendingMode] | None = None) -> list[UptimeSpan]:
    coordinator.service.nodes.flush_liveness(everything=True)  # as a stopping coordinator does
    with coordinator.service.db.transaction() as session:
        return liveness_rows.spans(session, identity.node_id, 0, 2**62, modes)


def test_signed_heartbeats_are_kept_as_spans_by_mode(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    seat = NodeStatus(LendingState(mode=LendingMode.ULTRA_SEAT))
    identity, client = _join(tmp_path, coordinator, "studio", ULTRA, seat)
    # The agent signs one heartbeat per half offline limit: each proves the node online for a
    # whole offline limit (the uptime span's credit), so the proof has no gaps.
    assert client._signed_heartbeat_interval_ms == coordinator.service.config.node_offline_after_ms // 2
    for _ in range(3):
        client.heartbeat(0, seat)  # the first signed, the others carry the status unsigned
    signed_at_ms, mode = client._last_signed
    client._last_signed = (signed_at_ms - client._signed_heartbeat_interval_ms, mode)  # half a limit on
    client.heartbeat(0, seat)  # signed: due
    client.heartbeat(1, NodeStatus(LendingState(mode=LendingMode.DEDICATED)))  # signed: a new mode
    client.heartbeat(0)  # unsigned: keeps the session alive, proves nothing
    spans = _spans(coordinator, identity)
    assert [(s.mode, s.beats) for s in spans] == [("ultra_seat", 2), ("dedicated", 1)]
    seat_span = spans[0]
    assert seat_span.first_received_ms <= seat_span.last_received_ms <= spans[1].first_received_ms
    # The span keeps its last heartbeat's signature: proof anyone can check with the node's key.
    last = Heartbeat(identity.node_id, seat_span.last_sent_at_ms, 0, seat.lending)
    assert signature_is_valid(identity.public_key_raw, heartbeat_message(last), seat_span.last_signature)
    assert len(_spans(coordinator, identity, frozenset({LendingMode.ULTRA_SEAT}))) == 1
    assert _node(coordinator, identity).lending.mode is LendingMode.DEDICATED
    client.close()


def test_forged_and_replayed_heartbeats_are_not_stored(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    identity, client = _join(tmp_path, coordinator, "studio", ULTRA)
    other = load_or_create_identity(tmp_path / "other.pem")
    status = NodeStatus(LendingState(mode=LendingMode.ULTRA_SEAT))
    forger = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
    forger.register(identity, ULTRA, (MODEL,), "", "studio", 1)
    proven = forger._metadata()  # the session, on the connection it registered on
    forger._identity = dataclasses.replace(identity, private_key=other.private_key)  # wrong key
    with pytest.raises(CallRejected, match="heartbeat signature does not verify"):
        forger.heartbeat(0, status)
    now_ms = time.time_ns() // 1_000_000
    claim = Heartbeat(identity.node_id, now_ms, 0, status.lending)
    forged_beat = node_pb2.HeartbeatRequest(  # a good session, a heartbeat signed by another key
        running_jobs=0, sent_at_ms=now_ms, signature=other.sign(heartbeat_message(claim)),
        lending=node_pb2.LendingState(mode="ultra_seat", accepting_jobs=True))
    with pytest.raises(grpc.RpcError) as forged:
        forger._stub.Heartbeat(forged_beat, timeout=5, metadata=proven)
    assert forged.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert _spans(coordinator, identity) == []
    forger.close()

    client.register(identity, ULTRA, (MODEL,), "", "studio", 1)
    client.heartbeat(0, status)
    sent_at_ms = client._last_sent_ms
    claim = Heartbeat(identity.node_id, sent_at_ms, 0, status.lending)
    replay = node_pb2.HeartbeatRequest(
        running_jobs=0, sent_at_ms=sent_at_ms, signature=identity.sign(heartbeat_message(claim)),
        lending=node_pb2.LendingState(mode="ultra_seat", accepting_jobs=True))
    client._stub.Heartbeat(replay, timeout=5, metadata=client._metadata())  # accepted, not counted
    assert [span.beats for span in _spans(coordinator, identity)] == [1]
    client.close()


def test_ultra_seat_needs_an_ultra_chip(tmp_path: Path, coordinator: RunningCoordinator) -> None:
    seat = NodeStatus(LendingState(mode=LendingMode.ULTRA_SEAT))
    identity = load_or_create_identity(tmp_path / "mini" / "identity.pem")
    client = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
    with pytest.raises(CallRejected) as refused:
        client.register(identity, MINI, (MODEL,), "", "mini", 1, seat)
    assert refused.value.code == "INVALID_ARGUMENT" and "use mode dedicated" in str(refused.value)
    client.register(identity, MINI, (MODEL,), "", "mini", 1)
    with pytest.raises(CallRejected):
        client.heartbeat(0, seat)
    client.close()


def test_lending_state_reaches_the_placement_snapshot(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    away = NodeStatus(LendingState(mode=LendingMode.IDLE, memory_cap_bytes=8 << 30),
                      warm_models=(MODEL.model_id,))
    identity, client = _join(tmp_path, coordinator, "mini", MINI, away)
    benchmark = BenchmarkResult(memory_bandwidth_gb_s=230.0, decode_tokens_per_s=400.0,
                                prefill_tokens_per_s=5000.0, reference_model="tiny",
                                reference_weights_bytes=12_000_000, measured_at_ms=1,
                                run_time_ms=900, batch_decode_tokens_per_s=((1, 400.0), (2, 610.5), (4, 900.0)))
    back = NodeStatus(LendingState(owner_active=True, accepting_jobs=False,
                                   reason="the owner is using this Mac", memory_cap_bytes=8 << 30),
                      benchmark=benchmark)
    client.heartbeat(0, back)
    with coordinator.service.db.transaction() as session:
        fleet, _ = snapshot(session, coordinator.service.clock.now_ms(), coordinator.service.config)
        stored = node_rows.benchmarks(session, identity.node_id)
    (mac,) = fleet.macs
    assert mac.owner_active and mac.memory_cap_bytes == 8 << 30
    assert mac.measured_bandwidth_gb_s == 230.0 and mac.warm_models == frozenset()
    # The batch figures placement counts a busy Mac's speed by: sent, stored, read back.
    assert mac.batch_decode_tokens_per_s == ((1, 400.0), (2, 610.5), (4, 900.0))
    assert [b.flag for b in stored] == [None] and stored[0].result == benchmark
    assert _node(coordinator, identity).lending.reason == "the owner is using this Mac"
    client.close()


@pytest.fixture(scope="module")
def measured_here(tmp_path_factory: pytest.TempPathFactory) -> BenchmarkResult:
    """A real self-benchmark of this machine (MLX on a shared CPU: far below any Ultra)."""
    from node_agent.inference.benchmark import run_benchmark
    from node_agent.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("reference") / "tiny")
    return run_benchmark(model, "mlxnet/tiny-llama (reference)", buffer_bytes=64 * 2**20)


def test_a_spoofed_ultra_benchmark_is_flagged(tmp_path: Path, coordinator: RunningCoordinator,
                                              measured_here: BenchmarkResult) -> None:
    # Claim an Ultra rated well above what this host measured (on any machine but a real
    # Ultra, the M3 Ultra's own 819 GB/s already is).
    rated = max(819.0, 4 * measured_here.memory_bandwidth_gb_s)
    claim = dataclasses.replace(ULTRA, memory_bandwidth_gb_s=rated)
    identity, client = _join(tmp_path, coordinator, "studio", claim,
                             NodeStatus(benchmark=measured_here))
    node = _node(coordinator, identity)
    assert node.benchmark_flag is not None and f"{rated:.0f} GB/s" in node.benchmark_flag
    # Placement now plans with what was measured, not what was claimed.
    assert node.measured_bandwidth_gb_s == measured_here.memory_bandwidth_gb_s
    with coordinator.service.db.transaction() as session:
        fleet, _ = snapshot(session, coordinator.service.clock.now_ms(), coordinator.service.config)
    assert fleet.macs[0].measured_bandwidth_gb_s == measured_here.memory_bandwidth_gb_s
    client.close()


def test_handing_back_a_started_job_requeues_it_without_its_tokens(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    _, first = _join(tmp_path, coordinator, "mini", MINI)
    with JobClient(f"127.0.0.1:{coordinator.port}", trust=PLAINTEXT) as consumer:
        job = consumer.submit(MODEL.model_id, "Hello", max_tokens=8)
    assert next(first.assignments()).job_id == job.job_id
    first.stream_tokens(job.job_id, iter([(0, (1, 2), "ab")]))
    first.report_failure(job.job_id, "the owner came back", handed_back=True)
    with JobClient(f"127.0.0.1:{coordinator.port}", trust=PLAINTEXT) as consumer:
        queued = consumer.get(job.job_id)
    # The only Mac is the one that handed it back; it is placed there again.
    assert queued.status in (job_pb2.JOB_STATUS_QUEUED, job_pb2.JOB_STATUS_ASSIGNED)
    assert queued.text == "" and queued.completion_tokens == 0
    again = next(first.assignments())  # the next attempt starts from token 0
    assert again.job_id == job.job_id
    assert first.stream_tokens(job.job_id, iter([(0, (1, 2, 3), "abc")])) == 3
    first.close()


def test_leaving_hands_back_jobs_and_takes_the_node_out_of_placement(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    identity, client = _join(tmp_path, coordinator, "mini", MINI)
    with JobClient(f"127.0.0.1:{coordinator.port}", trust=PLAINTEXT) as consumer:
        job = consumer.submit(MODEL.model_id, "Hello", max_tokens=8)
    next(client.assignments())
    assert client.leave("operator ran mlxnet node leave") == 1
    with coordinator.service.db.transaction() as session:
        fleet, _ = snapshot(session, coordinator.service.clock.now_ms(), coordinator.service.config)
        assert job_rows.job_by_id(session, job.job_id).status is JobStatus.QUEUED
    assert not fleet.macs[0].online
    client.register(identity, MINI, (MODEL,), "", "mini", 1)  # coming back re-joins
    with coordinator.service.db.transaction() as session:
        assert node_rows.node_by_id(session, identity.node_id).left_at_ms is None
    client.close()


def test_thunderbolt_local_domain_uuid_survives_the_wire() -> None:
    from contracts.hardware import ThunderboltLink
    from coordinator.rpc.convert import hardware_from_pb
    from node_agent.coordinator_client import _hardware_pb

    link = ThunderboltLink(port="bus_0", speed_gbps=80, thunderbolt_version=5,
                           peer_model_identifier="Mac16,5", peer_name="MacBook Pro",
                           peer_uid="0x1", peer_rdma_capable=True, local_domain_uuid="0x2")
    hardware = dataclasses.replace(ULTRA, thunderbolt_links=(link,), chip_tier=ChipTier.ULTRA)
    wire = node_pb2.Hardware.FromString(_hardware_pb(hardware).SerializeToString())
    assert hardware_from_pb(wire) == hardware


def test_a_reader_mid_stream_gets_exactly_the_unseen_tokens_after_a_hand_back(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    _join(tmp_path, coordinator, "mini", MINI)
    with JobClient(f"127.0.0.1:{coordinator.port}", trust=PLAINTEXT) as consumer:
        job = consumer.submit(MODEL.model_id, "Hello", max_tokens=8)
    with coordinator.service.db.transaction() as session:  # the first node's chunks, then dropped
        job_rows.append_tokens(session, job.job_id, TokenChunk(0, (1, 2, 3), "abc"))
        assert job_rows.chunks_for_reader(session, job.job_id, 0, 0)[0].text == "abc"
        job_rows.delete_tokens(session, job.job_id)
        # The next node chunks the same tokens differently: one straddles the reader's place.
        job_rows.append_tokens(session, job.job_id, TokenChunk(0, (1, 2), "ab"))
        job_rows.append_tokens(session, job.job_id, TokenChunk(2, (3, 4), "cd"))
        job_rows.append_tokens(session, job.job_id, TokenChunk(4, (5,), "e"))
        unseen = job_rows.chunks_for_reader(session, job.job_id, 3, 3)
        assert [(c.first_index, c.token_ids, c.text) for c in unseen] == [(3, (4,), "d"), (4, (5,), "e")]
        assert job_rows.chunks_for_reader(session, job.job_id, 5, 5) == []
