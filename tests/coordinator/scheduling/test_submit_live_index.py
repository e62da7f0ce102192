"""A submit (and a dry run) places over the scheduler's live index: its cost does not grow with
the fleet, a refused request keeps the index, and a Mac registered with another coordinator is
found before any job is refused for good. SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.errors import InvalidRequest, UnknownModel
from coordinator.model import JobStatus
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows
from coordinator.storage.database import Database, upgrade_schema
from node_agent.identity import load_or_create_identity
from tests.coordinator.scheduling.test_live_fleet import _service  # no periodic rebuild: only the submit's
from tests.coordinator.statements import statements_run, whole_fleet_reads
from tests.coordinator.service.test_service import HUGE, SMALL, _register, _submission


def _builds(*services: CoordinatorService) -> int:
    """Whole-fleet index builds, over these coordinators."""
    return sum(service.fleet.index_builds for service in services)


def test_a_submit_reads_no_whole_fleet(tmp_path: Path, database: Database) -> None:
    service = _service(database)
    for name in "abcd":
        _register(service, load_or_create_identity(tmp_path / f"{name}.pem"), (SMALL,))
    service.run_scheduler()  # the index is built once
    built = _builds(service)
    with statements_run(database.engine) as statements:
        jobs = [service.jobs.submit(_submission()).job for _ in range(3)]
    assert all(job.status is JobStatus.ASSIGNED for job in jobs)
    assert whole_fleet_reads(statements) == [] and statements  # the submits ran SQL, none of it a whole read
    assert _builds(service) == built
    # The index counted each job's commitment: the fourth Mac is the only one still free
    # (max_concurrent_jobs 1), and a fifth job waits for one.
    with statements_run(database.engine) as statements:
        fourth = service.jobs.submit(_submission()).job
        assert fourth.status is JobStatus.ASSIGNED
        assert len({job.node_ids[0] for job in (*jobs, fourth)}) == 4
        assert service.jobs.submit(_submission()).job.status is JobStatus.QUEUED
    assert whole_fleet_reads(statements) == [] and _builds(service) == built


def test_a_refused_request_keeps_the_index(tmp_path: Path, database: Database) -> None:
    service = _service(database)
    _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    service.run_scheduler()
    built = _builds(service)
    with pytest.raises(InvalidRequest):
        service.jobs.submit(_submission(prompt="   "))
    with pytest.raises(UnknownModel):
        service.jobs.submit(_submission(model="nobody-serves-this"))
    assert service.jobs.submit(_submission()).job.status is JobStatus.ASSIGNED
    # The unknown model looked for registrations the index had not read (none): no rebuild.
    assert _builds(service) == built


def test_a_mac_registered_with_another_coordinator_is_found_before_a_refusal(
        tmp_path: Path, database: Database) -> None:
    here, there = _service(database), _service(database)
    _register(here, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    assert here.jobs.submit(_submission()).job.status is JobStatus.ASSIGNED  # here's index is built
    # Another coordinator on the same database registers a Mac serving a model unknown here...
    _register(there, load_or_create_identity(tmp_path / "b.pem"), (SMALL, HUGE), memory_gb=4096)
    built = _builds(here, there)  # there's own index included
    job = here.jobs.submit(_submission(model="huge")).job
    assert job.status is JobStatus.ASSIGNED  # ...found, not refused as an unknown model
    assert _builds(here, there) == built + 1
    with database.transaction() as session:
        stored = job_rows.job_by_id(session, job.job_id)
    assert stored is not None and stored.node_ids == job.node_ids


def test_a_bigger_mac_registered_elsewhere_is_found_before_a_job_is_refused_for_good(
        tmp_path: Path, database: Database) -> None:
    here, there = _service(database), _service(database)
    _register(here, load_or_create_identity(tmp_path / "a.pem"), (SMALL, HUGE), memory_gb=64)
    here.run_scheduler()
    # Only a Mac registered with the other coordinator could hold this model.
    _register(there, load_or_create_identity(tmp_path / "b.pem"), (SMALL, HUGE), memory_gb=4096)
    assert here.jobs.submit(_submission(model="huge")).job.status is JobStatus.ASSIGNED


def test_submits_and_scheduling_passes_never_wait_on_each_other(
        tmp_path: Path, database_url: str) -> None:
    """A pass used to take the index's lock before its transaction's first statement (on SQLite,
    the write lock): a submit holding the write lock then waited for the pass, which waited for
    the write lock, until SQLite's busy timeout failed the pass."""
    upgrade_schema(database_url)
    db = Database(database_url, sqlite_busy_timeout_ms=3_000)  # fail fast, not in 30 s
    try:
        service = _service(db)
        _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,), memory_gb=512)
        errors: list[BaseException] = []

        def keep(work: Callable[[], object]) -> None:
            try:
                for _ in range(150):
                    work()
            except BaseException as error:  # noqa: BLE001 - reported by the assertion below
                errors.append(error)

        def submit_and_cancel() -> None:
            # Not durable, as the HTTP gateway submits: its transaction begins before the pass.
            service.jobs.cancel(service.jobs.submit(_submission(), durable=False).job.job_id)

        threads = [threading.Thread(target=keep, args=(work,))
                   for work in (submit_and_cancel, service.run_scheduler, service.run_scheduler)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
    finally:
        db.dispose()


def test_a_dry_run_reads_no_whole_fleet_and_finds_a_mac_registered_elsewhere(
        tmp_path: Path, database: Database) -> None:
    here, there = _service(database), _service(database)
    _register(here, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    here.run_scheduler()  # here's index is built
    built = _builds(here, there)
    with statements_run(database.engine) as statements:
        decision = here.jobs.explain_placement("small", 1024, 0.0)
    assert whole_fleet_reads(statements) == [] and statements  # it read, but not every node
    assert decision.node_ids and _builds(here, there) == built
    # Nothing was placed: the same Mac is still the answer, and a real submit still gets it.
    assert here.jobs.explain_placement("small", 1024, 0.0).node_ids == decision.node_ids
    assert here.jobs.submit(_submission()).job.node_ids == decision.node_ids
    # A Mac serving a model unknown here, registered with another coordinator: found, not refused.
    _register(there, load_or_create_identity(tmp_path / "b.pem"), (HUGE,), memory_gb=4096)
    built = _builds(here, there)  # there's own index included
    assert here.jobs.explain_placement("huge", 1024, 0.0).node_ids
    assert _builds(here, there) == built + 1


def test_a_mac_whose_job_ended_elsewhere_is_freed_from_the_commitment_read_alone(
        tmp_path: Path, database: Database) -> None:
    """A commitment that moved (here: another coordinator ended the job) is set in the index from
    the pass's read of commitments, without a re-read of the Mac's row (#27: one per receipt)."""
    service = _service(database)
    for name in "abcd":
        _register(service, load_or_create_identity(tmp_path / f"{name}.pem"), (SMALL,))
    jobs = [service.jobs.submit(_submission()).job for _ in range(4)]
    assert all(job.status is JobStatus.ASSIGNED for job in jobs)  # every Mac busy (max_concurrent_jobs 1)
    with database.transaction() as session:
        assert job_rows.transition_job(session, jobs[0].job_id, frozenset({JobStatus.ASSIGNED}),
                                       status=JobStatus.FAILED, error="ended elsewhere")
        assert job_rows.release_assignments(session, jobs[0].job_id) == list(jobs[0].node_ids)
    with statements_run(database.engine) as statements:
        assert service.run_scheduler().placed == ()  # nothing queued: the pass brings the index up to date
    assert statements and not [s for s in statements if " FROM nodes" in s]
    fifth = service.jobs.submit(_submission()).job
    assert fifth.status is JobStatus.ASSIGNED and fifth.node_ids == jobs[0].node_ids  # the freed Mac
