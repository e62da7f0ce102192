"""The scheduler's long-lived index, over a real database: after each event it equals a rebuild."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from contracts.lending import LendingState
from coordinator.config import CoordinatorConfig
from coordinator.model import JobStatus, NodeRecord
from coordinator.nodes.reports import HeartbeatReport
from coordinator.placement import FleetIndex
from coordinator.scheduling import fleet_reads, scheduler
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows, node_rows
from coordinator.storage.database import Database, upgrade_schema
from node_agent.identity import load_or_create_identity
from tests.coordinator.service.test_service import SMALL, FakeClock, _register, _submission


def _service(db: Database, clock: FakeClock | None = None) -> CoordinatorService:
    # A long rebuild interval: every pass below must come from the incremental updates.
    config = CoordinatorConfig(database_url="unused", fleet_rebuild_interval_ms=10**12)
    return CoordinatorService(db, clock or FakeClock(), config)


def _assert_live_index_equals_a_rebuild(service: CoordinatorService) -> FleetIndex:
    now = service.clock.now_ms()
    with service.db.transaction() as session, service.fleet.current(session, now) as live:
        fleet, _ = fleet_reads.snapshot(session, now, service.config)
        rebuilt = FleetIndex.build(fleet)
        assert {mac.node_id: mac for mac in live.snapshot().macs} == {mac.node_id: mac for mac in fleet.macs}
        assert live.pods() == rebuilt.pods()
        assert live.stats() == rebuilt.stats()
        return live


def _node(service: CoordinatorService, node_id: str) -> NodeRecord:
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    return node


def test_the_live_index_follows_registrations_commitments_reports_and_time(
        tmp_path: Path, database: Database) -> None:
    service = _service(database)
    first = _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    _assert_live_index_equals_a_rebuild(service)
    second = _register(service, load_or_create_identity(tmp_path / "b.pem"), (SMALL,), memory_gb=128)
    job = service.jobs.submit(_submission()).job  # placed and committed in the pass
    assert job.status is JobStatus.ASSIGNED
    live = _assert_live_index_equals_a_rebuild(service)
    assert live.mac(job.node_ids[0]).running_jobs == 1
    # The owner comes back to the first Mac: its heartbeat says so.
    service.nodes.heartbeat(_node(service, first), 0, HeartbeatReport(0, lending=LendingState(owner_active=True)))
    live = _assert_live_index_equals_a_rebuild(service)
    assert live.mac(first).owner_active
    service.jobs.cancel(job.job_id)  # the job's Mac is free again
    live = _assert_live_index_equals_a_rebuild(service)
    assert live.mac(job.node_ids[0]).running_jobs == 0
    # Time passes with no heartbeat from the second Mac: it counts as offline now.
    service.clock.ms += service.config.node_offline_after_ms + 1
    live = _assert_live_index_equals_a_rebuild(service)
    assert not live.mac(second).online
    service.nodes.leave(_node(service, first), "going home")
    live = _assert_live_index_equals_a_rebuild(service)
    assert not live.mac(first).online


def test_work_committed_by_another_coordinator_is_seen_before_the_next_decision(
        tmp_path: Path, database: Database) -> None:
    clock = FakeClock()
    ours, theirs = _service(database, clock), _service(database, clock)
    node = _register(theirs, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    ours.run_scheduler()  # our index now holds the idle Mac
    placed = theirs.jobs.submit(_submission()).job
    assert placed.node_ids == (node,)
    waiting = ours.jobs.submit(_submission(prompt="Again")).job  # one job per Mac: it must wait
    assert waiting.status is JobStatus.QUEUED
    assert _assert_live_index_equals_a_rebuild(ours).mac(node).running_jobs == 1


def test_a_report_made_to_another_coordinator_is_caught_at_commit(
        tmp_path: Path, database: Database, caplog: pytest.LogCaptureFixture) -> None:
    """Their heartbeat never reaches our notes; the re-read under the row lock catches it."""
    caplog.set_level(logging.INFO, logger="coordinator.scheduling.scheduler")
    clock = FakeClock()
    ours, theirs = _service(database, clock), _service(database, clock)
    node = _register(theirs, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    ours.run_scheduler()
    theirs.nodes.heartbeat(_node(theirs, node), 0, HeartbeatReport(0, lending=LendingState(owner_active=True)))
    job = ours.jobs.submit(_submission()).job
    assert job.status is JobStatus.QUEUED  # not placed on a Mac whose owner is back
    assert f"placement index was behind the database on {node}" in caplog.text
    assert _assert_live_index_equals_a_rebuild(ours).mac(node).owner_active


def test_a_mac_registered_with_another_coordinator_is_found_before_any_job_is_refused(
        tmp_path: Path, database: Database) -> None:
    clock = FakeClock()
    ours, theirs = _service(database, clock), _service(database, clock)
    ours.run_scheduler()  # our index holds no Mac at all
    node = _register(theirs, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    job = ours.jobs.submit(_submission()).job  # a model our index has never heard of
    assert job.status is JobStatus.ASSIGNED and job.node_ids == (node,)


def test_a_pass_over_an_empty_queue_takes_no_write_lock_and_still_catches_the_index_up(
        tmp_path: Path, database: Database) -> None:
    """Every receipt and heartbeat runs a pass; most find no job waiting."""
    clock = FakeClock()
    service = _service(database, clock)
    node = _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    service.run_scheduler()
    service.nodes.heartbeat(_node(service, node), 0, HeartbeatReport(0, lending=LendingState(owner_active=True)))
    writes = service.db.write_transactions_begun  # the heartbeat's own write; its pass comes after
    assert service.run_scheduler() == scheduler.SchedulingPass((), ())
    assert service.db.write_transactions_begun == writes
    # The pass read the heartbeat into the index: a decision sees the owner is back.
    with service.db.read_transaction() as session, service.fleet.current(session, clock.now_ms()) as live:
        assert live.mac(node).owner_active
    assert service.fleet.rebuilt_this_pass is False

    # A waiting job: the owner leaves, and that heartbeat's pass takes the write lock and places it.
    waiting = service.jobs.submit(_submission()).job
    assert waiting.status is JobStatus.QUEUED
    record = _node(service, node)
    writes = service.db.write_transactions_begun
    service.nodes.heartbeat(record, 0, HeartbeatReport(0, lending=LendingState(owner_active=False)))
    assert service.db.write_transactions_begun == writes + 2  # the heartbeat's write, then its pass's
    assert service.jobs.get(waiting.job_id).job.node_ids == (node,)


def test_coordinators_racing_on_one_database_never_over_commit_a_mac(
        tmp_path: Path, database_url: str) -> None:
    """Two coordinators, each with its own engine and index, submit and schedule at once over
    three one-job Macs: each Mac ends with exactly one job, and every other job waits."""
    macs, jobs_per_thread, threads_per_coordinator = 3, 8, 2
    upgrade_schema(database_url)
    databases = [Database(database_url), Database(database_url)]
    try:
        clock = FakeClock()
        services = [_service(db, clock) for db in databases]
        nodes = {_register(services[0], load_or_create_identity(tmp_path / f"{n}.pem"), (SMALL,))
                 for n in range(macs)}
        for service in services:
            service.run_scheduler()  # both indexes hold every idle Mac: each would place on any
        start = threading.Barrier(len(services) * threads_per_coordinator)
        errors: list[BaseException] = []
        submitted: list[str] = []

        def submit_and_schedule(service: CoordinatorService, thread: int) -> None:
            try:
                start.wait()
                for n in range(jobs_per_thread):
                    job = service.jobs.submit(_submission(request_id=f"{id(service)}-{thread}-{n}")).job
                    submitted.append(job.job_id)
                    service.run_scheduler()
            except BaseException as error:  # noqa: BLE001 - reported by the assertion below
                errors.append(error)

        threads = [threading.Thread(target=submit_and_schedule, args=(service, n))
                   for service in services for n in range(threads_per_coordinator)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        for service in services:
            service.run_scheduler()
        with databases[0].transaction() as session:
            committed = job_rows.committed_by_node(session)
            statuses = [job_rows.job_by_id(session, job_id).status for job_id in submitted]
        assert {node: count for node, (_, count, _) in committed.items()} == {node: 1 for node in nodes}
        assert len(submitted) == len(threads) * jobs_per_thread  # no job lost
        assert statuses.count(JobStatus.ASSIGNED) == macs
        assert statuses.count(JobStatus.QUEUED) == len(submitted) - macs
    finally:
        for db in databases:
            db.dispose()


REBUILD_INTERVAL_MS = 60_000
WAIT_S = 60.0  # a bound on a stuck build, not a latency figure


class _HeldRead:
    """A read transaction for build_aside that, once the fleet is read, holds the build until
    released: what happens meanwhile is what a build of seconds at 10,000 Macs lets in."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.read = threading.Event()
        self.release = threading.Event()

    @contextmanager
    def __call__(self) -> Iterator[Session]:
        with self._db.read_transaction() as session:
            yield session
        self.read.set()
        assert self.release.wait(WAIT_S)


def _build_aside_held(service: CoordinatorService) -> tuple[_HeldRead, threading.Thread, list[bool]]:
    held, built = _HeldRead(service.db), []
    thread = threading.Thread(target=lambda: built.append(
        service.fleet.build_aside(held, service.clock.now_ms())))
    thread.start()
    assert held.read.wait(WAIT_S)
    return held, thread, built


def _live_index(service: CoordinatorService) -> FleetIndex:
    with service.db.read_transaction() as session, service.fleet.current(session, service.clock.now_ms()) as live:
        return live


def test_the_safety_net_rebuild_is_built_aside_and_swapped_in_caught_up(
        tmp_path: Path, database: Database) -> None:
    """Issue 27: at 10,000 Macs the rebuild took 4-20 s under the pass lock, and a registration
    that met it waited as long. Built aside, it holds no lock: registrations, submits, reports
    and leaves go through while it is held, and the index swapped in has caught up with them."""
    clock = FakeClock()
    service = CoordinatorService(database, clock, CoordinatorConfig(
        database_url="unused", fleet_rebuild_interval_ms=REBUILD_INTERVAL_MS))
    first = _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    second = _register(service, load_or_create_identity(tmp_path / "b.pem"), (SMALL,), memory_gb=128)
    job = service.jobs.submit(_submission()).job
    assert job.status is JobStatus.ASSIGNED
    assert service.fleet.build_aside(service.db.read_transaction, clock.now_ms()) is False  # not due
    clock.ms += REBUILD_INTERVAL_MS
    before, builds_in_pass = _live_index(service), service.fleet.index_builds_in_pass

    held, thread, built = _build_aside_held(service)
    try:  # each of these runs a pass, over the old index: none waits for the build
        third = _register(service, load_or_create_identity(tmp_path / "c.pem"), (SMALL,))
        service.nodes.heartbeat(_node(service, first), 0, HeartbeatReport(0, lending=LendingState(owner_active=True)))
        service.jobs.cancel(job.job_id)
        service.nodes.leave(_node(service, second), "going home")
        placed = service.jobs.submit(_submission(request_id="after")).job
        assert placed.status is JobStatus.ASSIGNED and placed.node_ids == (third,)
        assert _live_index(service) is before
    finally:
        held.release.set()
        thread.join(WAIT_S)
    assert built == [True]

    live = _assert_live_index_equals_a_rebuild(service)
    assert live is not before  # swapped in, and caught up with all of the above
    assert live.mac(first).owner_active and not live.mac(second).online
    assert live.mac(third).running_jobs == 1
    assert service.fleet.index_builds_in_pass == builds_in_pass  # no pass rebuilt in place
    assert service.fleet.build_aside(service.db.read_transaction, clock.now_ms()) is False  # due again later


def test_an_index_built_aside_is_dropped_when_a_pass_rebuilt_meanwhile(
        tmp_path: Path, database: Database) -> None:
    clock = FakeClock()
    service = CoordinatorService(database, clock, CoordinatorConfig(
        database_url="unused", fleet_rebuild_interval_ms=REBUILD_INTERVAL_MS))
    _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    service.run_scheduler()
    clock.ms += REBUILD_INTERVAL_MS
    held, thread, built = _build_aside_held(service)
    try:
        service.fleet.note_rebuild()
        rebuilt = _live_index(service)  # this pass rebuilt in place: newer than the one held aside
        late = _register(service, load_or_create_identity(tmp_path / "b.pem"), (SMALL,))
    finally:
        held.release.set()
        thread.join(WAIT_S)
    assert built == [True]
    assert _live_index(service) is rebuilt
    assert _assert_live_index_equals_a_rebuild(service).has_mac(late)


def test_without_its_loop_a_pass_still_rebuilds_one_interval_late(tmp_path: Path, database: Database) -> None:
    clock = FakeClock()
    service = CoordinatorService(database, clock, CoordinatorConfig(
        database_url="unused", fleet_rebuild_interval_ms=REBUILD_INTERVAL_MS))
    _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    service.run_scheduler()
    builds = service.fleet.index_builds_in_pass
    clock.ms += REBUILD_INTERVAL_MS
    service.run_scheduler()
    assert service.fleet.index_builds_in_pass == builds  # left to the loop
    clock.ms += REBUILD_INTERVAL_MS
    service.run_scheduler()
    assert service.fleet.index_builds_in_pass == builds + 1
