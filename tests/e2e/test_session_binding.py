"""Sessions bound to their connection, between real processes over TLS (issue 25): a token
replayed on another TLS connection is refused even though it is the right token, and a real
node agent binds its session again by itself after its coordinator restarts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from contracts.signing import BIND_NONCE_METADATA_KEY, SESSION_METADATA_KEY
from contracts.tls import split_address
from mlxnet.consumer import JobClient, StreamedTokens
from mlxnet.processes import Child, spawn_node, start_coordinator, wait_until_registered
from node_agent.coordinator_client import CoordinatorClient
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import job_pb2, node_pb2, node_pb2_grpc
from protos.wire.channel import open_channel

pytestmark = pytest.mark.e2e

MODEL_ID = "test/tiny-llama"
REBIND_TIMEOUT_S = 60.0
OWN_CONNECTION = ("grpc.use_local_subchannel_pool", 1)  # never share a TCP connection with another channel


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Child]:
    child = start_coordinator(tmp_path, database_url=f"sqlite:///{tmp_path / 'c.db'}",
                              heartbeat_interval_ms=500, allow_anonymous=True)
    yield child
    child.stop()


def test_a_token_replayed_on_another_tls_connection_is_refused(tmp_path: Path, coordinator: Child) -> None:
    address, trust = coordinator.extra["address"], coordinator.trust
    node = CoordinatorClient(address, trust)
    try:
        identity = load_or_create_identity(tmp_path / "victim.pem")
        node.register(identity, simulated_profile("m4-pro-64"), (), identity.node_id, "victim", 1)
        node.heartbeat(0)
        channel, _ = open_channel(address, trust, options=(OWN_CONNECTION,))  # the thief's own TLS connection
        with channel:
            stub = node_pb2_grpc.NodeServiceStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Heartbeat(node_pb2.HeartbeatRequest(), timeout=30,
                               metadata=((SESSION_METADATA_KEY, node.session_token),))
            assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
            assert "not bound to this connection" in (refused.value.details() or "")
            assert len(dict(refused.value.trailing_metadata() or ())[BIND_NONCE_METADATA_KEY]) == 32
        node.heartbeat(0)  # the node's own connection is unaffected
    finally:
        node.close()


def test_a_node_binds_its_session_again_after_its_coordinator_restarts(
        tmp_path: Path, tiny_model_dir: Path, coordinator: Child) -> None:
    address, trust = coordinator.extra["address"], coordinator.trust
    node = wait_until_registered(spawn_node(tmp_path, "mini", address, [f"{MODEL_ID}={tiny_model_dir}"],
                                            profile="m4-pro-64", trust=trust))
    try:
        coordinator.stop()
        again = start_coordinator(tmp_path, database_url=f"sqlite:///{tmp_path / 'c.db'}",
                                  port=split_address(address)[1], heartbeat_interval_ms=500,
                                  allow_anonymous=True)
        try:
            deadline = time.monotonic() + REBIND_TIMEOUT_S
            while "session bound to a new connection" not in node.log_path.read_text():
                assert time.monotonic() < deadline, node.log_path.read_text()[-3000:]
                time.sleep(0.2)
            with JobClient(address, trust=trust) as client:  # the node serves on, on its new connection
                job = client.submit(MODEL_ID, "And Abraham", max_tokens=8)
                done = [i for i in client.stream(job.job_id) if not isinstance(i, StreamedTokens)][0]
            assert done.status == job_pb2.JOB_STATUS_COMPLETED, done.error
            log = node.log_path.read_text()
            assert log.count("registered as") == 1, "the node kept its session: it did not register again"
        finally:
            again.stop()
    finally:
        node.stop()
