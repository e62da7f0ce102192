"""Over a real database: jobs of one model on one Mac commit its weights once, so a Mac that holds one
copy of a model takes several of its jobs; the weights leave with the last of them."""

from __future__ import annotations

from pathlib import Path

from contracts.hardware import ChipTier, HardwareReport
from contracts.models import ModelSpec
from coordinator.model import JobStatus
from coordinator.placement.config import MemoryConfig
from coordinator.placement.memory import estimate_job_memory
from coordinator.storage import job_rows
from coordinator.storage.database import Database
from node_agent.identity import load_or_create_identity
from tests.coordinator.scheduling.test_live_fleet import _assert_live_index_equals_a_rebuild, _service
from tests.coordinator.service.test_service import _submission
from tests.node_registration import register_node

GIB = 1 << 30
# 12 GiB of weights: a 24 GB Mac lent while idle (16 GiB after its owner's reserve) holds one copy.
MID = ModelSpec(model_id="mid", weights_bytes=12 * GIB, parameter_count=24 * 10**9, num_layers=8,
                num_attention_heads=8, num_kv_heads=8, head_dim=64, max_context_tokens=4096,
                weights_digest="6c" * 32, vocab_size=32_000)


def test_a_mac_holding_one_copy_of_a_model_runs_several_of_its_jobs(tmp_path: Path, database: Database) -> None:
    service = _service(database)
    hardware = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO, memory_bytes=24 * GIB,
                              gpu_working_set_bytes=18 * GIB, gpu_cores=20, memory_bandwidth_gb_s=273.0,
                              os_name="macOS", simulated=True)
    node_id, _ = register_node(service, load_or_create_identity(tmp_path / "a.pem"), hardware, (MID,), "op",
                               max_concurrent_jobs=4)
    jobs = [service.jobs.submit(_submission("mid", request_id=f"r{n}", max_tokens=64)).job for n in range(3)]
    assert [job.status for job in jobs] == [JobStatus.ASSIGNED] * 3
    with service.db.transaction() as session:
        (memory, running, shared), = job_rows.committed_by_node(session).values()
    alone = estimate_job_memory(MID, jobs[0].context_tokens, MemoryConfig())
    assert 2 * alone.total_bytes > 16 * GIB  # counted whole each, two would not fit
    assert (memory, running) == (alone.total_bytes + 2 * (alone.total_bytes - alone.batch_shared_bytes), 3)
    assert shared == (("mid", alone.batch_shared_bytes, 3),)
    _assert_live_index_equals_a_rebuild(service)
    for n, job in enumerate(jobs):
        service.jobs.cancel(job.job_id)
        with service.db.transaction() as session:
            committed = job_rows.committed_by_node(session)
        left = len(jobs) - n - 1
        if left:  # the weights stay while any job of the model runs
            assert committed[node_id] == (alone.total_bytes + (left - 1) * (alone.total_bytes - alone.batch_shared_bytes),
                                          left, (("mid", alone.batch_shared_bytes, left),))
        else:
            assert node_id not in committed
        _assert_live_index_equals_a_rebuild(service)


def test_while_any_mac_has_a_free_slot_jobs_go_there_and_then_they_queue_in_order(
        tmp_path: Path, database: Database) -> None:
    service = _service(database)
    hardware = HardwareReport(chip="Apple M4 Max", chip_family="M4", chip_tier=ChipTier.MAX, memory_bytes=64 * GIB,
                              gpu_working_set_bytes=48 * GIB, gpu_cores=40, memory_bandwidth_gb_s=546.0,
                              os_name="macOS", simulated=True)
    macs = [register_node(service, load_or_create_identity(tmp_path / f"{n}.pem"), hardware, (MID,), "op",
                          max_concurrent_jobs=2)[0] for n in range(3)]
    placed = [service.jobs.submit(_submission("mid", request_id=f"r{n}", max_tokens=64)).job for n in range(6)]
    assert all(job.status is JobStatus.ASSIGNED for job in placed)
    assert sorted(job.node_ids[0] for job in placed) == sorted(macs * 2)  # every slot of every Mac
    waiting = [service.jobs.submit(_submission("mid", request_id=f"w{n}", max_tokens=64)) for n in range(2)]
    assert [(view.job.status, view.queue_position) for view in waiting] == [(JobStatus.QUEUED, 1),
                                                                           (JobStatus.QUEUED, 2)]
    service.jobs.cancel(placed[0].job_id)  # a slot frees: the oldest waiting job takes it
    assert service.jobs.get(waiting[0].job.job_id).job.status is JobStatus.ASSIGNED
    assert service.jobs.get(waiting[1].job.job_id).queue_position == 1
