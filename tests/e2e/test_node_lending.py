"""Idle lending end to end: an owner comes back, the job is handed back and completes elsewhere.

Two node agents (real processes, real MLX) lend in idle mode and read their
owner's activity from files the test writes (node_agent.lending.activity), a
fake idle source in place of ioreg and pmset. Then `mlxnet node leave` drains
one of them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlx_lm import load, stream_generate

from coordinator.storage import liveness_rows, node_rows
from coordinator.storage.database import Database
from mlxnet.cli import main
from mlxnet.consumer import JobClient, StreamedTokens
from mlxnet.processes import Child, spawn_node, start_coordinator, wait_until_registered
from node_agent.lending.config import BenchmarkConfig, LendingConfig, NodeConfig, save_config
from node_agent.status_file import read_status
from protos.mlxnet.v1 import job_pb2
from tests.conftest import fresh_postgres_database

pytestmark = pytest.mark.e2e
MODEL_ID = "test/tiny-llama"
MAX_TOKENS = 1200  # long enough that the owner returns mid-job
AWAY = {"idle_seconds": 3600, "on_ac_power": True, "cpu_speed_limit_percent": None}
BACK = {"idle_seconds": 2, "on_ac_power": True, "cpu_speed_limit_percent": None}


@dataclass
class LendingNetwork:
    work_dir: Path
    database_url: str
    coordinator: Child
    nodes: dict[str, Child]

    @property
    def address(self) -> str:
        return self.coordinator.extra["address"]

    def set_owner(self, name: str, activity: dict[str, object]) -> None:
        path = self.work_dir / f"{name}-activity.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(activity))
        temporary.replace(path)  # the agent never reads half a file


def _node_config(work_dir: Path, name: str) -> None:
    save_config(work_dir / "nodes" / name / "node.toml", NodeConfig(
        lending=LendingConfig(idle_minutes=1, poll_seconds=0.1, handback_after_s=0.5,
                              activity_file=str(work_dir / f"{name}-activity.json")),
        benchmark=BenchmarkConfig(enabled="off")))


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def lending_network(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                    tiny_model_dir: Path) -> Iterator[LendingNetwork]:
    work_dir = tmp_path_factory.mktemp(f"lending-{request.param}")
    with contextlib.ExitStack() as stack:
        database_url = (f"sqlite:///{work_dir / 'coordinator.db'}" if request.param == "sqlite"
                        else stack.enter_context(fresh_postgres_database()))
        coordinator = start_coordinator(work_dir, database_url=database_url,
                                        heartbeat_interval_ms=500, allow_anonymous=True)
        net = LendingNetwork(work_dir, database_url, coordinator, {})
        try:
            net.set_owner("first", AWAY)
            net.set_owner("second", BACK)  # its owner is at the keyboard: it takes no work yet
            for name in ("first", "second"):
                _node_config(work_dir, name)
            children = [spawn_node(work_dir, name, net.address, [f"{MODEL_ID}={tiny_model_dir}"],
                                   profile="m4-pro-64", operator=name) for name in ("first", "second")]
            net.nodes = {child.name: wait_until_registered(child) for child in children}
            yield net
        finally:
            for child in [*net.nodes.values(), coordinator]:
                child.stop()


def _greedy_text(model_dir: Path, prompt: str, max_tokens: int) -> str:
    model, tokenizer = load(str(model_dir))
    return "".join(r.text for r in stream_generate(model, tokenizer, prompt, max_tokens=max_tokens))


def test_a_returning_owner_hands_the_job_back_and_it_completes_elsewhere(
        lending_network: LendingNetwork, tiny_model_dir: Path) -> None:
    net = lending_network
    first_id, second_id = (net.nodes[n].extra["node_id"] for n in ("first", "second"))
    streamed: list[str] = []
    with JobClient(net.address, trust=net.coordinator.trust) as client:
        job = client.submit(MODEL_ID, "In the beginning", max_tokens=MAX_TOKENS)
        final = None
        for item in client.stream(job.job_id):
            if isinstance(item, StreamedTokens):
                if not streamed:  # the first node is generating: its owner comes back now
                    net.set_owner("second", AWAY)
                    net.set_owner("first", BACK)
                streamed.append(item.text)
            else:
                final = item
    assert final is not None and final.status == job_pb2.JOB_STATUS_COMPLETED, final
    assert list(final.node_ids) == [second_id] and final.receipt_verified
    assert final.completion_tokens == MAX_TOKENS
    expected = _greedy_text(tiny_model_dir, "In the beginning", MAX_TOKENS)
    assert final.text == expected and "".join(streamed) == expected
    first = read_status(net.work_dir / "nodes" / "first" / "status.json")
    assert first is not None and first.unfinished_today == 1 and first.jobs_today == 0
    assert not first.accepting_jobs and first.owner_active and "using this Mac" in first.reason
    db = Database(net.database_url)
    try:
        with db.transaction() as session:
            first_node = node_rows.node_by_id(session, first_id)
            assert first_node is not None and first_node.lending.owner_active
            # Signed heartbeats were kept for both nodes while they ran (as uptime spans).
            assert liveness_rows.spans(session, first_id, 0, 2**62)
            assert liveness_rows.spans(session, second_id, 0, 2**62)
    finally:
        db.dispose()


def test_node_leave_drains_deregisters_and_stops_the_agent(
        lending_network: LendingNetwork, capsys: pytest.CaptureFixture[str]) -> None:
    net = lending_network
    child = net.nodes["second"]
    assert main(["node", "--data-dir", str(net.work_dir / "nodes" / "second"), "status"]) == 0
    assert "taking work:  yes" in capsys.readouterr().out
    assert main(["node", "--data-dir", str(net.work_dir / "nodes" / "second"), "leave",
                 "--timeout-s", "60"]) == 0
    assert child.process.wait(30) == 0
    db = Database(net.database_url)
    try:
        with db.transaction() as session:
            node = node_rows.node_by_id(session, child.extra["node_id"])
            assert node is not None and node.left_at_ms is not None
            assert not node.lending.accepting_jobs and node.lending.reason == "leaving the network"
    finally:
        db.dispose()
