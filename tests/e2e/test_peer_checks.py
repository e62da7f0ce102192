"""Issue 32, with real processes: a coordinator holding no model (no --verify-model), and nodes of
different operators serving the tiny model that check each other's sampled jobs.

Five node agents over TLS: alice and alice2 (one operator), bob, mallory (an altered agent that
generates with a 4-bit copy while declaring the true weights: `tests/adversarial/models.py`'s q4
cheat) and oscar (an altered agent whose check results come from another model: a lying checker).
Every job of a new node is sampled. Peers catch mallory; a referee of a third operator catches
oscar; no check ever pairs a node with its own operator's node.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coordinator.storage import node_rows
from coordinator.storage.database import Database
from coordinator.verification import peer_store, store
from coordinator.verification.peer_store import PeerCheckStatus
from coordinator.verification.peers import Role
from coordinator.verification.store import CheckStatus, CreditState
from ledger.api import TransferKind, check_fee_transfer_id, get_transfer
from mlxnet.consumer import JobClient
from mlxnet.processes import Child, spawn_node, start_coordinator, start_nodes, wait_until_registered
from node_agent.tiny_model import build_tiny_model
from protos.mlxnet.v1 import job_pb2
from tests.conftest import fresh_postgres_database

pytestmark = pytest.mark.e2e
MODEL_ID = "test/tiny-llama"
PROMPTS = ("In the beginning", "And Noah", "Abram went", "And God said", "The ark", "Sarai")
WAIT_S = 240.0
POLL_S = 0.2  # the verdicts are written by another process: no event reaches this one


def _eventually(what: str, found: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    pause, deadline = threading.Event(), time.monotonic() + timeout_s
    while not found():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout_s:.0f} s")
        pause.wait(POLL_S)


@pytest.fixture(params=["sqlite", "postgres"])
def network(request: pytest.FixtureRequest, tmp_path: Path,
            tiny_model_dir: Path) -> Iterator[tuple[Child, list[Child], Database]]:
    with contextlib.ExitStack() as stack:
        database_url = (f"sqlite:///{tmp_path / 'coordinator.db'}" if request.param == "sqlite"
                        else stack.enter_context(fresh_postgres_database()))
        yield from _network(tmp_path, tiny_model_dir, database_url)


def _network(tmp_path: Path, tiny_model_dir: Path,
             database_url: str) -> Iterator[tuple[Child, list[Child], Database]]:
    from tests.adversarial.models import quantized_copy

    q4 = quantized_copy(tiny_model_dir, tmp_path / "q4", 4)
    other = build_tiny_model(tmp_path / "other-seed", seed=1)
    # No --verify-model: it holds no model. Five nodes of four operators: pairs repeat soon.
    coordinator = start_coordinator(tmp_path, database_url=database_url, heartbeat_interval_ms=500,
                                    allow_anonymous=True, extra_args=("--peer-pair-cooldown-s", "1"))
    nodes: list[Child] = []
    try:
        model = [f"{MODEL_ID}={tiny_model_dir}"]
        address, trust = coordinator.extra["address"], coordinator.trust
        nodes += start_nodes(tmp_path, address, [("alice", model, "m4-pro-64", "alice"),
                                                 ("alice2", model, "m4-pro-64", "alice"),
                                                 ("bob", model, "m4-pro-64", "bob")], trust)
        rogues = [spawn_node(tmp_path, "mallory", address, model, profile="m4-pro-64", operator="mallory",
                             trust=trust, program="tests.e2e.rogue_node",
                             env={"MLXNET_ROGUE_JOBS_MODEL": str(q4)}),
                  spawn_node(tmp_path, "oscar", address, model, profile="m4-pro-64", operator="oscar",
                             trust=trust, program="tests.e2e.rogue_node",
                             env={"MLXNET_ROGUE_CHECKS_MODEL": str(other)})]
        nodes += [wait_until_registered(child) for child in rogues]
        db = Database(database_url)
        try:
            yield coordinator, nodes, db
        finally:
            db.dispose()
    finally:
        for child in [*nodes, coordinator]:
            child.stop()


def _run_round(coordinator: Child) -> list[str]:
    """Jobs submitted at once, so every node gets some; their ids once all completed."""
    with JobClient(coordinator.extra["address"], trust=coordinator.trust) as consumer:
        jobs = [consumer.submit(MODEL_ID, prompt, max_tokens=12) for prompt in PROMPTS]
        done = []
        for job in jobs:
            final = [i for i in consumer.stream(job.job_id) if isinstance(i, job_pb2.Job)][-1]
            assert final.status == job_pb2.JOB_STATUS_COMPLETED, final.error
            done.append(job.job_id)
    return done


@pytest.mark.timeout(600)  # six processes, a quantized copy and up to eight rounds on a loaded 2-core machine
def test_peers_check_sampled_jobs_catch_a_cheat_and_a_lying_checker(
        network: tuple[Child, list[Child], Database]) -> None:
    coordinator, nodes, db = network
    node_id = {child.name: child.extra["node_id"] for child in nodes}
    with db.transaction() as session:
        operator_of = {n.node_id: n.operator_id for n in node_rows.all_nodes(session)}
    mallory, oscar = node_id["mallory"], node_id["oscar"]

    def trust(node: str):  # type: ignore[no-untyped-def]
        with db.transaction() as session:
            return store.node_trust_of(session, node).record

    def oscar_lost_a_dispute() -> bool:
        return trust(oscar).checks_failed >= 1

    jobs: list[str] = []
    for _ in range(8):  # rounds until mallory was caught and oscar was chosen as a checker and caught
        jobs += _run_round(coordinator)
        if trust(mallory).checks_failed >= 1 and oscar_lost_a_dispute():
            break
    _eventually("mallory caught by a peer check", lambda: trust(mallory).checks_failed >= 1)
    _eventually("oscar caught lying by a referee", oscar_lost_a_dispute)

    def decided() -> bool:
        with db.transaction() as session:
            checks = [store.check_by_job(session, job) for job in jobs]
        return all(c is not None and c.status not in (CheckStatus.WAITING, CheckStatus.PEER) for c in checks)

    _eventually("every sampled job's check decided", decided)
    with db.transaction() as session:
        checks = {job: store.check_by_job(session, job) for job in jobs}
        rows = [row for job in jobs for row in peer_store.of_job(session, job)]
        fees = {row.check_id: get_transfer(session, check_fee_transfer_id(row.check_id))
                for row in rows if row.fee_transfer_id}

    # Every check was by a peer (the coordinator holds no model), never one of the same operator.
    assert rows and all(row.checker_node_id is not None for row in rows if row.status is not PeerCheckStatus.WAITING)
    for row in rows:
        if row.checker_node_id is not None:
            assert row.checker_node_id != row.checked_node_id
            assert operator_of[row.checker_node_id] != operator_of[row.checked_node_id], row
    # Honest nodes' jobs passed on a peer's replay, and their credit is posted.
    honest = [c for c in checks.values() if c is not None and c.node_id not in (mallory,)]
    assert honest and all(c.status is CheckStatus.PASSED and c.credit_state is CreditState.POSTED
                          and (c.verifier or "").startswith("peer ") for c in honest), honest
    # Mallory's 4-bit jobs failed their checks: the credit voided, the evidence says why.
    cheated = [c for c in checks.values() if c is not None and c.node_id == mallory]
    assert cheated and all(c.status is CheckStatus.FAILED and c.credit_state is CreditState.VOIDED
                           for c in cheated)
    assert all("differ from the replay" in (c.reason or "") or "not what the model samples" in (c.reason or "")
               for c in cheated)
    # Oscar's lies were disputed, a referee of a third operator ruled, and oscar earned nothing for them.
    lies = [r for r in rows if r.role is Role.CHECK and r.checker_node_id == oscar and r.passed is False
            and checks[r.job_id] is not None and checks[r.job_id].node_id != mallory]  # type: ignore[union-attr]
    assert lies and all(r.fee_transfer_id is None for r in lies)
    for lie in lies:
        referees = [r for r in rows if r.job_id == lie.job_id and r.role is Role.REFEREE
                    and r.status is PeerCheckStatus.ANSWERED]
        assert referees and all(operator_of[r.checker_node_id] not in  # type: ignore[index]
                                (operator_of[oscar], operator_of[lie.checked_node_id]) for r in referees)
    # Every answer that stands was paid: one CHECK_FEE transfer per check job, in integer base units.
    assert fees and all(t is not None and t.kind is TransferKind.CHECK_FEE and isinstance(t.amount, int)
                        and t.amount > 0 for t in fees.values())
    # What the operator reads: who checked the job, what each found, the fee each earned.
    lie = lies[0]
    shown = subprocess.run([sys.executable, "-m", "mlxnet.cli", "checks", "--job", lie.job_id,
                            "--database-url", coordinator.extra["database_url"]],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"check by {oscar} (answered, found it differs)" in shown
    assert "referee by" in shown and "found it matched; paid" in shown and "check passed" in shown
    # The lying checker's trust fell like a cheater's.
    assert trust(oscar).checks_failed >= 1 and trust(node_id["bob"]).checks_failed == 0
    assert trust(node_id["alice"]).checks_failed == 0 == trust(node_id["alice2"]).checks_failed
