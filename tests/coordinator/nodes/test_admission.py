"""Sybil (issue 25): registrations are limited per source address and per operator, and stale
registrations expire. The burst goes over real gRPC, as the attacker's client did.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from coordinator.config import CoordinatorConfig, RegistrationLimits
from coordinator.errors import RateLimited
from coordinator.nodes.admission import TokenBuckets, address_of_peer
from coordinator.server import RunningCoordinator, start
from coordinator.service import CoordinatorService
from coordinator.storage import node_rows
from coordinator.storage.database import Database, upgrade_schema
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import node_pb2, node_pb2_grpc
from tests.coordinator.statements import statements_run, whole_fleet_reads
from tests.coordinator.verification.test_outcomes import MODEL, FakeClock
from tests.node_registration import register_node

MINI = simulated_profile("m4-pro-64")


def test_a_bucket_allows_its_burst_then_its_rate() -> None:
    buckets = TokenBuckets(burst=3, per_minute=60, buckets_max=10)
    assert [buckets.take("a", 0) for _ in range(4)] == [True, True, True, False]
    assert buckets.seconds_until_next("a", 0) == 1
    assert not buckets.take("a", 999) and buckets.take("a", 1_999)  # one token a second
    assert buckets.take("b", 0)  # buckets are per key


def test_buckets_are_bounded_in_number() -> None:
    buckets = TokenBuckets(burst=1, per_minute=1, buckets_max=2)
    for key in ("a", "b", "c"):
        assert buckets.take(key, 0)
    assert buckets.take("a", 0)  # "a" was dropped as least recently used: a full bucket again


@pytest.mark.parametrize("peer, address", [("ipv4:10.1.2.3:5555", "10.1.2.3"),
                                           ("ipv6:[::1]:5555", "::1"), ("unix:/tmp/x", "unix:/tmp/x")])
def test_the_port_is_not_part_of_the_address(peer: str, address: str) -> None:
    assert address_of_peer(peer) == address


@pytest.fixture
def coordinator(database_url: str) -> Iterator[RunningCoordinator]:
    running = start(CoordinatorConfig(database_url=database_url))
    try:
        yield running
    finally:
        running.stop(grace_s=0)


def test_a_sybil_burst_from_one_address_is_refused_past_its_burst(coordinator: RunningCoordinator) -> None:
    limits = coordinator.service.config.registration_limits
    started = time.monotonic()
    with grpc.insecure_channel(f"127.0.0.1:{coordinator.port}") as channel:
        stub = node_pb2_grpc.NodeServiceStub(channel)
        granted = 0
        with pytest.raises(grpc.RpcError) as refused:
            for _ in range(1_000):
                stub.RegisterChallenge(node_pb2.RegisterChallengeRequest(
                    public_key=os.urandom(32)), timeout=10)
                granted += 1
    # The burst, plus what the bucket refilled meanwhile (each nonce is a database write now).
    refilled = int((time.monotonic() - started) * limits.per_address_per_minute / 60)
    assert limits.per_address_burst <= granted <= limits.per_address_burst + refilled
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "too many registrations from 127.0.0.1; try again in" in (refused.value.details() or "")


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    upgrade_schema(database_url)
    db = Database(database_url)
    limits = RegistrationLimits(per_operator_burst=2, per_operator_per_minute=1,
                                node_expire_after_ms=3_600_000)
    config = CoordinatorConfig(database_url=database_url, registration_limits=limits)
    yield CoordinatorService(db, FakeClock(), config)  # type: ignore[arg-type]
    db.dispose()


def test_an_operator_registers_nodes_only_so_fast(service: CoordinatorService, tmp_path: Path) -> None:
    for name in ("a", "b"):
        register_node(service, load_or_create_identity(tmp_path / f"{name}.pem"), MINI, (MODEL,), "alice")
    with pytest.raises(RateLimited, match="operator 'alice' is registering nodes faster than"):
        register_node(service, load_or_create_identity(tmp_path / "c.pem"), MINI, (MODEL,), "alice")
    register_node(service, load_or_create_identity(tmp_path / "d.pem"), MINI, (MODEL,), "bob")
    service.clock.ms += 60_000  # type: ignore[attr-defined]
    register_node(service, load_or_create_identity(tmp_path / "c.pem"), MINI, (MODEL,), "alice")


def test_a_silent_registration_expires(service: CoordinatorService, tmp_path: Path) -> None:
    identity = load_or_create_identity(tmp_path / "a.pem")
    register_node(service, identity, MINI, (MODEL,), "alice")
    service.clock.ms += 3_600_000 - 1  # type: ignore[attr-defined]
    service.nodes.reap_offline()
    with service.db.transaction() as session:
        assert node_rows.node_by_id(session, identity.node_id).left_at_ms is None  # type: ignore[union-attr]
    service.clock.ms += 2  # type: ignore[attr-defined]
    service.nodes.reap_offline()
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, identity.node_id)
    assert node is not None and node.left_at_ms is not None
    assert node.lending.reason == node_rows.EXPIRED_REASON


def test_the_reaper_reads_silent_nodes_holding_no_jobs_in_one_statement(service: CoordinatorService,
                                                                       tmp_path: Path) -> None:
    """Held streams come with silent sessions: a pass over them must not walk every node's
    jobs inside the write transaction an honest heartbeat waits for."""
    operators = [f"op-{n}" for n in range(12)]  # one operator each: its registration limit is 2
    for n, operator in enumerate(operators):
        register_node(service, load_or_create_identity(tmp_path / f"{n}.pem"), MINI, (MODEL,), operator)
    service.clock.ms += service.config.node_offline_after_ms + 1  # type: ignore[attr-defined]
    with statements_run(service.db.engine) as seen:
        assert service.nodes.reap_offline() == []
    job_reads = [statement for statement in seen if "job_assignments" in statement]
    assert len(job_reads) == 1, job_reads
    assert whole_fleet_reads(seen) == []
