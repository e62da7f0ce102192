"""Rows stored before the edge checked every field (an infinite bandwidth) must not crash reads:
the coordinator restarts, builds its index, serves the fleet page, heartbeats and placements."""

from __future__ import annotations

import json
import math
import urllib.request
from pathlib import Path

import grpc
from sqlalchemy import insert, update

from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from coordinator.server import start
from coordinator.storage import node_rows
from coordinator.storage.tables import node_benchmarks, nodes
from node_agent.coordinator_client import CoordinatorClient
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import job_pb2, job_pb2_grpc
from tests.coordinator.rpc.test_node_protocol import HARDWARE, MODEL


PLAINTEXT = CoordinatorTrust(insecure=True)  # the coordinator here serves plaintext on loopback


def _poison(config: CoordinatorConfig, node_id: str) -> None:
    """Write what an unchecked registration and benchmark once wrote: infinities."""
    running = start(config)
    try:
        with running.service.db.transaction() as session:
            row = session.execute(nodes.select().where(nodes.c.node_id == node_id)).one()
            hardware = json.loads(row.hardware_json)
            hardware["memory_bandwidth_gb_s"] = math.inf
            session.execute(update(nodes).where(nodes.c.node_id == node_id).values(
                memory_bandwidth_gb_s=math.inf, measured_bandwidth_gb_s=math.inf,
                hardware_json=json.dumps(hardware)))
            session.execute(insert(node_benchmarks).values(
                node_id=node_id, measured_at_ms=1, received_at_ms=1, memory_bandwidth_gb_s=math.inf,
                decode_tokens_per_s=-math.inf, prefill_tokens_per_s=1.0, reference_model="tiny",
                reference_weights_bytes=1, run_time_ms=1, flag=None))
    finally:
        running.stop(grace_s=0)


def test_a_stored_infinite_bandwidth_reads_as_unknown_and_takes_nothing_down(tmp_path: Path) -> None:
    config = CoordinatorConfig(database_url=f"sqlite:///{tmp_path / 'coordinator.db'}",
                               allow_anonymous=True)
    identity = load_or_create_identity(tmp_path / "node.pem")
    running = start(config)
    client = CoordinatorClient(f"127.0.0.1:{running.port}", PLAINTEXT)
    client.register(identity, HARDWARE, (MODEL,), identity.node_id, "n", 1)  # its own operator: no key
    client.close()
    running.stop(grace_s=0)
    _poison(config, identity.node_id)

    running = start(config, http_port=0)  # builds the fleet index from the poisoned row
    try:
        assert running.gateway is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{running.gateway.port}/world/api/fleet") as page:
            listed = json.loads(page.read())["nodes"]
        assert [(n["bandwidth_gb_s"], n["measured_bandwidth_gb_s"]) for n in listed] == [(0.0, None)]
        with running.service.db.transaction() as session:
            node = node_rows.node_by_id(session, identity.node_id)
            assert node is not None and node.measured_bandwidth_gb_s is None
            assert node.hardware.memory_bandwidth_gb_s == 0.0
            assert node_rows.benchmarks(session, identity.node_id) == []
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            placement = job_pb2_grpc.JobServiceStub(channel).ExplainPlacement(
                job_pb2.ExplainPlacementRequest(model=MODEL.model_id, context_tokens=64), timeout=30)
        assert placement.placeable and math.isfinite(placement.predicted_decode_tokens_per_s)
    finally:
        running.stop(grace_s=0)
