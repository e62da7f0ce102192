"""Challenge benchmarks against real processes (issue 25): a coordinator that challenges verified
Macs often, a real node agent (this Linux host, its own self-benchmark) that decodes its
challenge on the tiny reference model and passes, and a fake that claims a fast benchmark and
answers without decoding, and goes back to "claimed"."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from contracts.benchmarks import BenchmarkResult
from contracts.hardware import ChipTier, HardwareReport
from coordinator.storage import challenge_rows, node_rows
from coordinator.storage.database import Database
from mlxnet.processes import spawn_node, start_coordinator, wait_until_registered
from node_agent.coordinator_client import Challenge, CoordinatorClient, NodeStatus
from node_agent.identity import load_or_create_identity
from node_agent.model_files import describe_model

pytestmark = pytest.mark.e2e
MODEL_ID = "test/tiny-llama"
WAIT_S = 420  # the node's self-benchmark and its challenge on a shared machine; bounds a stuck test
LINUX_BOX = HardwareReport(chip="Linux box", chip_family="", chip_tier=ChipTier.NOT_APPLE,
                           memory_bytes=16 << 30, gpu_working_set_bytes=12 << 30, gpu_cores=0,
                           memory_bandwidth_gb_s=20.0, os_name="Linux")
CLAIMED = BenchmarkResult(memory_bandwidth_gb_s=20.0, decode_tokens_per_s=400.0, prefill_tokens_per_s=4000.0,
                          reference_model="mlxnet/tiny-llama", reference_weights_bytes=12_000_000,
                          measured_at_ms=1, run_time_ms=1_000)


def _outcomes(db: Database, node_id: str) -> list[str | None]:
    with db.transaction() as session:
        return [outcome for _, outcome in challenge_rows.outcomes(session, node_id)]


def _wait_for_outcome(db: Database, node_id: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        done = [outcome for outcome in _outcomes(db, node_id) if outcome not in (None, "not delivered")]
        if done:
            return done[0]
        time.sleep(0.2)
    raise AssertionError(f"no challenge of {node_id} was decided in {WAIT_S} s: {_outcomes(db, node_id)}")


@pytest.mark.timeout(900)  # the node's self-benchmark, then its challenge, on a loaded 2-core machine
def test_a_real_node_passes_its_challenge_and_a_fake_that_does_not_decode_fails(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    coordinator = start_coordinator(tmp_path, database_url=database_url, heartbeat_interval_ms=500,
                                    extra_args=("--challenge-mean-interval-s", "0.5"))
    db = Database(database_url)
    fake = CoordinatorClient(coordinator.extra["address"], coordinator.trust)
    node = None
    try:
        node = wait_until_registered(spawn_node(
            tmp_path, "honest", coordinator.extra["address"], [f"{MODEL_ID}={tiny_model_dir}"],
            trust=coordinator.trust, extra_args=("--benchmark", "on")))
        identity = load_or_create_identity(tmp_path / "fake.pem")
        fake.register(identity, LINUX_BOX, (describe_model(MODEL_ID, tiny_model_dir),), "", "fake", 1,
                      NodeStatus(benchmark=CLAIMED))
        answers: list[str | None] = []

        def answer_without_decoding() -> None:
            for item in fake.assignments():
                if isinstance(item, Challenge):
                    answers.append(fake.answer_challenge(item.challenge_id, (0,) * item.decode_tokens, 1e6))
                    return

        listener = threading.Thread(target=answer_without_decoding, daemon=True)
        listener.start()
        assert _wait_for_outcome(db, identity.node_id).startswith("challenge benchmark answered")
        listener.join(30)
        assert answers and answers[0] is not None and "it was not decoded" in answers[0]
        assert _wait_for_outcome(db, node.extra["node_id"]) == "passed"
        with db.transaction() as session:
            honest = node_rows.node_by_id(session, node.extra["node_id"])
            faked = node_rows.node_by_id(session, identity.node_id)
        assert honest is not None and honest.hardware_verified
        assert faked is not None and not faked.hardware_verified and faked.challenge_flag
    finally:
        fake.close()
        if node is not None:
            node.stop()
        coordinator.stop()
        db.dispose()
