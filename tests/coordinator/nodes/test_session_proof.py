"""The session token is bound to the node's key (issue 25): every call carries a fresh proof
signed by the key that registered the session, so a token replayed from another connection,
without that key, is refused with UNAUTHENTICATED."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from coordinator.errors import Unauthenticated
from coordinator.live.notifier import fleet_topic
from coordinator.nodes.reports import HeartbeatReport
from coordinator.server import RunningCoordinator, start
from node_agent.coordinator_client import CoordinatorClient
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import node_pb2, node_pb2_grpc
from tests.coordinator.nodes.test_admission import service  # noqa: F401 (the fixture)
from tests.coordinator.verification.test_outcomes import MODEL
from tests.node_registration import register_node, session_proof

MINI = simulated_profile("m4-pro-64")


def test_a_token_is_good_only_with_a_recent_proof_by_its_own_key(service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    alice = load_or_create_identity(tmp_path / "alice.pem")
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _, token = register_node(service, alice, MINI, (MODEL,), "alice")
    now = service.clock.now_ms()
    assert service.nodes.authenticate(token, session_proof(alice, token, now)).node_id == alice.node_id
    refusals = {
        "no proof": None,
        "another key's proof": session_proof(mallory, token, now),
        "a proof of another token": session_proof(alice, token + "x", now),
        "a stale proof": session_proof(alice, token, now - 300_001),
        "garbage": "12.not base64!",
        "a huge number": "9" * 40 + ".AAAA",
    }
    for name, proof in refusals.items():
        with pytest.raises(Unauthenticated):
            service.nodes.authenticate(token, proof)
            pytest.fail(f"{name} was taken")


def test_a_heartbeat_answered_from_memory_checks_the_proof_too(service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """The in-memory heartbeat (a cached session, no database) takes the (token, proof) pair apart
    and refuses a token without its key's proof, like every other call."""
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _, token = register_node(service, alice, MINI, (MODEL,), "alice")
    now = service.clock.now_ms()
    answered = service.nodes.heartbeat_in_memory(token, session_proof(alice, token, now), HeartbeatReport(0))
    assert answered == now
    with pytest.raises(Unauthenticated):
        service.nodes.heartbeat_in_memory(token, None, HeartbeatReport(0))


@pytest.fixture
def coordinator(database_url: str) -> Iterator[RunningCoordinator]:
    running = start(CoordinatorConfig(database_url=database_url))
    try:
        yield running
    finally:
        running.stop(grace_s=0)


def test_a_token_replayed_from_another_connection_is_refused(coordinator: RunningCoordinator,
                                                             tmp_path: Path) -> None:
    address = f"127.0.0.1:{coordinator.port}"
    node = CoordinatorClient(address, CoordinatorTrust(insecure=True))
    try:
        node.register(load_or_create_identity(tmp_path / "n.pem"), MINI, (MODEL,), "", "n", 1)
        node.heartbeat(0)  # the node itself, proving its key on each call
        with grpc.insecure_channel(address) as channel:  # an eavesdropper's own connection
            stub = node_pb2_grpc.NodeServiceStub(channel)
            for metadata in ((("x-mlxnet-session", node.session_token),),
                             (("x-mlxnet-session", node.session_token),
                              ("x-mlxnet-session-proof", "1.AAAA"))):
                with pytest.raises(grpc.RpcError) as refused:
                    stub.Heartbeat(node_pb2.HeartbeatRequest(), metadata=metadata, timeout=10)
                assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
                assert "x-mlxnet-session-proof" in (refused.value.details() or "") or \
                    "bound to its key" in (refused.value.details() or "") or \
                    "clock" in (refused.value.details() or "")
        node.heartbeat(0)  # and the node's own session still works
    finally:
        node.close()


def test_a_cached_session_serves_longer_while_other_coordinators_news_can_drop_it(  # noqa: F811
        service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 27: with a 30 s cache a heartbeat every 10 s re-read its session once in 3 beats, a
    PostgreSQL transaction each. While the relay is up the cache serves 10 minutes, and a node
    registering or leaving through another coordinator drops its session here at once."""
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _, token = register_node(service, alice, MINI, (MODEL,), "alice")
    config = service.config

    def authenticate_reads(ms_later: int) -> int:
        service.clock.ms += ms_later
        reads = service.db.read_transactions_begun
        now = service.clock.now_ms()
        assert service.nodes.authenticate(token, session_proof(alice, token, now)).node_id == alice.node_id
        return service.db.read_transactions_begun - reads

    assert authenticate_reads(config.session_cache_ttl_ms + 1) == 1  # no relay: 30 s
    service.notifier.set_relayed(True)
    assert authenticate_reads(config.session_cache_ttl_ms + 1) == 0
    assert authenticate_reads(config.session_cache_relayed_ttl_ms - config.session_cache_ttl_ms - 2) == 0
    assert authenticate_reads(2) == 1  # ten minutes: read again
    service.core.hear_relayed(fleet_topic(alice.node_id))  # it registered again elsewhere
    assert authenticate_reads(1) == 1
    assert authenticate_reads(1) == 0
    service.notifier.set_relayed(False)  # the relay is down: 30 s again
    assert authenticate_reads(config.session_cache_ttl_ms + 1) == 1
