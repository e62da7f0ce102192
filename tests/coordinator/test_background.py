"""Supervised background work: a loop survives failures, backs off, and reports its health
(issue 28, item 3: the reaper thread died on a database error and never came back)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coordinator.background import Loop, _verifier_loop, coordinator_loops, start_loops, supervise
from coordinator.errors import DatabaseUnavailable
from coordinator.live.health import HealthBoard
from coordinator.live.notifier import job_topic
from coordinator.model import JobStatus
from coordinator.money.epochs import EpochSettings
from coordinator.service import VERIFICATION_TOPIC, CoordinatorService
from node_agent.identity import load_or_create_identity
from tests.conftest import fresh_postgres_database
from tests.coordinator.gateway.service_harness import make_service, new_consumer, register_node
from tests.coordinator.outage import database_outage

WAIT_S = 60.0  # a deadline for every wait; never reached when the code works


class HealthLog:
    """The board's flips, as events a test can wait on."""

    def __init__(self, board: HealthBoard) -> None:
        self.flips: list[bool] = []
        self._changed = threading.Condition()
        board.on_change(self._note)

    def _note(self, healthy: bool) -> None:
        with self._changed:
            self.flips.append(healthy)
            self._changed.notify_all()

    def wait_for(self, flips: list[bool]) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.flips[:len(flips)] == flips, WAIT_S), self.flips


def test_a_loop_survives_failures_reports_unhealthy_and_recovers() -> None:
    board = HealthBoard()
    health = HealthLog(board)
    stopping = threading.Event()
    outcomes: list[BaseException | None] = [DatabaseUnavailable("away", retry_after_s=1),
                                            AssertionError("a bug"), None]
    passes: list[int] = []
    done = threading.Event()

    def step() -> None:
        passes.append(len(passes))
        outcome = outcomes[min(len(passes) - 1, len(outcomes) - 1)]
        if outcome is not None:
            raise outcome
        done.set()

    thread = threading.Thread(target=supervise, args=(Loop("reaper", step, lambda: stopping.wait(0.001)),
                                                      stopping, board, 0.001, 0.002))
    thread.start()
    assert done.wait(WAIT_S)
    health.wait_for([True, False, True])  # healthy at start, failing twice, then working again
    stopping.set()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    (loop,) = board.loops()
    assert loop.healthy and loop.failures == 0 and len(passes) >= 3


@pytest.fixture
def postgres_service() -> Iterator[CoordinatorService]:
    with fresh_postgres_database() as url:
        service = make_service(url, heartbeat_interval_ms=50, node_offline_after_ms=200)
        yield service
        service.db.dispose()


def test_the_reaper_hands_back_a_dead_nodes_job_after_a_database_outage(
        postgres_service: CoordinatorService, tmp_path: Path) -> None:
    """Issue 28: after `pg_ctl restart -m immediate` the reaper thread was dead; a job on a dead
    node stayed running and its reservation open until the coordinator was restarted."""
    service = postgres_service
    node = register_node(service, load_or_create_identity(tmp_path / "node.pem"), 4)
    consumer = new_consumer(service, "acme")
    job = service.jobs.submit(consumer.submission(max_tokens=40), consumer.caller).job
    assert job.node_ids == (node.node_id,)
    health = HealthLog(service.health)
    stopping = threading.Event()
    loops = [loop for loop in coordinator_loops(service, stopping, EpochSettings(3600, 60_000))
             if loop.name in ("reaper", "billing", "credits", "scheduler")]
    threads = start_loops(loops, stopping, service.health)
    try:
        with database_outage(service.db.url):
            health.wait_for([True, False])
            with pytest.raises(DatabaseUnavailable):
                service.jobs.get(job.job_id)
        service.clock.ms += 10 * service.config.node_offline_after_ms  # type: ignore[attr-defined]
        health.wait_for([True, False, True])
        assert _wait_until(service, job.job_id, lambda: service.jobs.get(job.job_id).job.status
                           is JobStatus.QUEUED), "the reaper never handed the job back"
    finally:
        stopping.set()
        for thread in threads:
            thread.join(WAIT_S)
    assert all(not thread.is_alive() for thread in threads)
    assert all(loop.healthy for loop in service.health.loops())


def _wait_until(service: CoordinatorService, job_id: str, done: Callable[[], bool]) -> bool:
    """Wake on the job's notifications (the reaper notifies a job it hands back), with a deadline."""
    topic = job_topic(job_id)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        seen = service.notifier.version(topic)
        if done():
            return True
        service.notifier.wait(topic, seen, deadline - time.monotonic())
    return done()


def test_the_verifier_loop_gathers_the_wake_ups_of_its_gap_into_one_pass(database_url: str) -> None:
    """Each receipt wakes the verifier; a pass per receipt read the waiting checks and the
    challenge answers each time (#27). Woken five times at once, it waits out the gap first."""
    service = make_service(database_url)
    loop = _verifier_loop(service, threading.Event(), gap_s=0.3)
    for _ in range(5):  # five receipts, after the pass the loop was made for
        service.notifier.notify(VERIFICATION_TOPIC)
    started = time.monotonic()
    loop.pause()  # returns once the gap is over: the wake-ups are not lost, nor each a pass
    assert time.monotonic() - started >= 0.3
    service.db.dispose()
