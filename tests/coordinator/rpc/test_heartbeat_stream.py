"""Heartbeats as messages on one open stream per node (#27), with the unary call as fallback."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path

import grpc
import pytest

from contracts.tls import CoordinatorTrust
from coordinator.server import RunningCoordinator
from node_agent.coordinator_client import CallRejected, CoordinatorClient
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import node_pb2, node_pb2_grpc
from tests.coordinator.nodes.test_admission import coordinator  # noqa: F401 (the fixture)
from tests.coordinator.verification.test_outcomes import MODEL

PLAINTEXT = CoordinatorTrust(insecure=True)
MINI = simulated_profile("m4-pro-64")


def test_heartbeats_share_one_stream_and_are_checked_one_by_one(coordinator: RunningCoordinator,
                                                                tmp_path: Path) -> None:
    node = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
    try:
        identity = load_or_create_identity(tmp_path / "n.pem")
        node.register(identity, MINI, (MODEL,), "", "n", 1)
        for running in (0, 1, 0):
            node.heartbeat(running)
        assert coordinator.server.streams.count("Heartbeats") == 1
        assert coordinator.service.nodes.liveness.knows(identity.node_id)
        with pytest.raises(CallRejected, match="running_jobs must be from 0 to"):  # refused as a call would be
            node.heartbeat(10_000)
        node.heartbeat(0)  # a new stream after the refused one
    finally:
        node.close()


class _UnaryOnly(node_pb2_grpc.NodeServiceServicer):
    """An older coordinator: Heartbeat, and no Heartbeats stream."""

    def __init__(self) -> None:
        self.beats = 0

    def RegisterChallenge(self, request, context):  # noqa: N802
        return node_pb2.RegisterChallengeResponse(nonce=b"n" * 32, expires_at_ms=1)

    def Register(self, request, context):  # noqa: N802
        return node_pb2.RegisterResponse(node_id="n", session_token="t", heartbeat_interval_ms=1000)

    def Heartbeat(self, request, context):  # noqa: N802
        self.beats += 1
        return node_pb2.HeartbeatResponse(server_time_ms=1)


def test_a_coordinator_without_the_stream_gets_unary_heartbeats(tmp_path: Path) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = _UnaryOnly()
    node_pb2_grpc.add_NodeServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    node = CoordinatorClient(f"127.0.0.1:{port}", PLAINTEXT)
    try:
        node.register(load_or_create_identity(tmp_path / "n.pem"), MINI, (MODEL,), "", "n", 1)
        node.heartbeat(0)
        node.heartbeat(0)
        assert servicer.beats == 2
    finally:
        node.close()
        server.stop(0)
