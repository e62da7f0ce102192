"""Coordinator use cases over a real database (SQLite and PostgreSQL) with a fake clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.hardware import ChipTier, HardwareReport
from contracts.ids import new_job_id
from contracts.models import ModelSpec
from contracts.signing import register_challenge
from coordinator.config import CoordinatorConfig
from coordinator.errors import InvalidRequest, NotFound, Unplaceable
from coordinator.jobs.submission import Submission
from coordinator.model import JobRecord, JobStatus, TokenChunk
from coordinator.nodes.registry import Registration
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows, node_rows
from coordinator.storage.database import Database, upgrade_schema
from node_agent.identity import Identity, load_or_create_identity

GIB = 1 << 30
SMALL = ModelSpec(model_id="small", weights_bytes=GIB, parameter_count=500_000_000, num_layers=8,
                  num_attention_heads=8, num_kv_heads=8, head_dim=64, max_context_tokens=4096)
HUGE = ModelSpec(model_id="huge", weights_bytes=2000 * GIB, parameter_count=10**12, num_layers=60,
                 num_attention_heads=64, num_kv_heads=8, head_dim=128, max_context_tokens=4096)


class FakeClock:
    def __init__(self) -> None:
        self.ms = time.time_ns() // 1_000_000

    def now_ms(self) -> int:
        return self.ms


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    upgrade_schema(database_url)
    db = Database(database_url)
    yield CoordinatorService(db, FakeClock(), CoordinatorConfig(database_url=database_url))
    db.dispose()


def _register(service: CoordinatorService, identity: Identity, models: tuple[ModelSpec, ...],
              memory_gb: int = 64) -> str:
    now = service.clock.now_ms()
    hardware = HardwareReport(chip="Apple M4 Max", chip_family="M4", chip_tier=ChipTier.MAX,
                              memory_bytes=memory_gb * GIB, gpu_working_set_bytes=memory_gb * GIB * 3 // 4,
                              gpu_cores=40, memory_bandwidth_gb_s=546.0, os_name="macOS", simulated=True)
    node_id, _ = service.nodes.register(Registration(
        public_key=identity.public_key_raw,
        signature=identity.sign(register_challenge(identity.node_id, now)), timestamp_ms=now,
        hardware=hardware, models=models, operator_id="op", display_name="n", max_concurrent_jobs=1))
    return node_id


def _submission(model: str = "small", **changes: object) -> Submission:
    fields = dict(consumer_id="c", model_id=model, prompt="Hello", max_tokens=8, temperature=0.0,
                  top_p=0.0, seed=0, request_id="", min_decode_tokens_per_s=0.0)
    fields.update(changes)
    return Submission(**fields)  # type: ignore[arg-type]


def _job_count(service: CoordinatorService) -> int:
    with service.db.transaction() as session:
        return len(job_rows.queued_jobs(session, 1000))


@pytest.mark.parametrize(("changes", "needle"), [
    (dict(prompt="   "), "prompt is empty"),
    (dict(max_tokens=-5), "max_tokens"),
    (dict(max_tokens=10**6), "max_tokens"),
    (dict(top_p=1.5), "top_p"),
    (dict(seed=-1), "seed"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(request_id="r" * 500), "request_id"),
])
def test_invalid_fields_are_named(service: CoordinatorService, changes: dict, needle: str) -> None:
    with pytest.raises(InvalidRequest, match=needle):
        service.jobs.submit(_submission(**changes))


def test_unknown_and_impossible_models_are_refused_at_once(tmp_path: Path,
                                                           service: CoordinatorService) -> None:
    _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL, HUGE))
    with pytest.raises(NotFound, match="served models: huge, small"):
        service.jobs.submit(_submission("nope"))
    with pytest.raises(Unplaceable, match="no Mac or pod"):
        service.jobs.submit(_submission("huge"))
    assert _job_count(service) == 0


def test_busy_fleet_queues_with_a_position_then_places(tmp_path: Path,
                                                       service: CoordinatorService) -> None:
    node = _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    first = service.jobs.submit(_submission())
    second = service.jobs.submit(_submission(prompt="Again"))
    assert first.job.status is JobStatus.ASSIGNED and first.job.node_ids == (node,)
    assert second.job.status is JobStatus.QUEUED and second.queue_position == 1
    service.jobs.cancel(first.job.job_id)  # frees the Mac
    assert service.jobs.get(second.job.job_id).job.status is JobStatus.ASSIGNED


def test_restarted_node_gets_untouched_jobs_back_and_streamed_ones_fail(
        tmp_path: Path, service: CoordinatorService) -> None:
    identity = load_or_create_identity(tmp_path / "a.pem")
    node_id = _register(service, identity, (SMALL,))
    job = service.jobs.submit(_submission()).job
    _register(service, identity, (SMALL,))  # the agent restarted: it holds nothing now
    again = service.jobs.get(job.job_id).job
    assert again.status is JobStatus.ASSIGNED and again.attempt == 2  # placed again
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, (1, 2), "ab"))
    _register(service, identity, (SMALL,))
    failed = service.jobs.get(job.job_id).job
    assert failed.status is JobStatus.FAILED and "mid-stream" in (failed.error or "")


def test_silent_nodes_are_reaped(tmp_path: Path, service: CoordinatorService) -> None:
    _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    job = service.jobs.submit(_submission()).job
    service.clock.ms += service.config.node_offline_after_ms + 1  # type: ignore[attr-defined]
    assert service.nodes.reap_offline() == [job.job_id]
    view = service.jobs.get(job.job_id)
    assert view.job.status is JobStatus.QUEUED  # waits: the only Mac is offline
    fresh = _register(service, load_or_create_identity(tmp_path / "b.pem"), (SMALL,))
    assert service.jobs.get(job.job_id).job.node_ids == (fresh,)


def test_retried_request_id_returns_the_first_job(service: CoordinatorService, tmp_path: Path) -> None:
    _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    first = service.jobs.submit(_submission(request_id="r1"))
    second = service.jobs.submit(_submission(request_id="r1", prompt="different"))
    assert first.job.job_id == second.job.job_id and second.job.prompt == "Hello"


def test_a_job_stored_without_a_savepoint_is_still_found_as_a_duplicate(
        service: CoordinatorService) -> None:
    job = JobRecord(job_id=new_job_id(), consumer_id="c", request_id=None, model_id="small",
                            prompt="Hi", max_tokens=8, temperature=0.0, top_p=1.0, seed=0,
                            min_decode_tokens_per_s=0.0, context_tokens=10,
                            status=JobStatus.QUEUED, created_at_ms=0)
    with service.db.transaction() as session:
        assert job_rows.insert_job(session, job, id_is_new=True)
        assert not job_rows.insert_job(session, job)  # the guarded insert answers, and rolls back
        assert job_rows.job_by_id(session, job.job_id) == job  # only its own savepoint


def test_a_job_placed_at_submit_is_answered_as_stored(service: CoordinatorService,
                                                      tmp_path: Path) -> None:
    _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    view = service.jobs.submit(_submission())
    assert view.job.status is JobStatus.ASSIGNED and view.chips == ("Apple M4 Max",)
    assert view == service.jobs.get(view.job.job_id)  # the view built without a read is the same
