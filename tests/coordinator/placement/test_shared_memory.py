"""A Mac holds a model's weights once however many jobs of it run there (they decode in one batch):
each later job commits only its own part, and the weights leave with the model's last job."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contracts.hardware import LinkKind
from contracts.ids import JobId
from coordinator.placement import FleetIndex, JobRequest, Placement, place, place_exhaustive
from coordinator.placement.filters import FilterReason
from coordinator.placement.memory import estimate_job_memory, mac_ceiling_bytes
from tests.coordinator.placement.harness import GIB, LLAMA_70B_4BIT, M4_MAX, QWEN3_4B_4BIT, Fleet, job, must_place
from tests.coordinator.placement.test_decisions import comparable
from tests.coordinator.placement.test_properties import CONFIG, SETTINGS

CONTEXT = 8192


def _one_mac(memory_gib: int = 64, slots: int = 8) -> tuple[Fleet, FleetIndex]:
    fleet = Fleet(CONFIG)
    fleet.mac(M4_MAX, memory_gib, (QWEN3_4B_4BIT, LLAMA_70B_4BIT), name="studio", max_concurrent_jobs=slots)
    return fleet, fleet.index()


def test_a_second_job_of_a_model_commits_its_own_part_and_the_last_to_leave_frees_the_weights() -> None:
    _, index = _one_mac()
    estimate = estimate_job_memory(QWEN3_4B_4BIT, CONTEXT, CONFIG.memory)
    own_part = estimate.total_bytes - estimate.batch_shared_bytes
    first = must_place(place(job(QWEN3_4B_4BIT, CONTEXT, name="a"), index))
    assert first.shared_memory_bytes == estimate.batch_shared_bytes == QWEN3_4B_4BIT.weights_bytes + GIB
    assert index.try_commit(first)
    assert index.commitment("studio") == (estimate.total_bytes, 1, (("qwen3-4b-4bit", estimate.batch_shared_bytes, 1),))
    second = must_place(place(job(QWEN3_4B_4BIT, CONTEXT, name="b"), index))
    assert index.try_commit(second)
    assert index.commitment("studio")[:2] == (estimate.total_bytes + own_part, 2)
    index.release(first)  # the second still runs: the weights stay
    assert index.commitment("studio") == (estimate.total_bytes, 1, (("qwen3-4b-4bit", estimate.batch_shared_bytes, 1),))
    index.release(second)
    assert index.commitment("studio") == (0, 0, ())


def test_jobs_of_one_model_fill_a_mac_that_would_hold_only_one_of_them_counted_whole() -> None:
    # 64 GB M4 Max: a 48 GiB GPU budget and an idle owner's reserve leave 48 GiB; Llama 70B 4-bit
    # (about 37 GiB of weights) at 8k context needs about 42 GiB alone, so a second copy never fits.
    _, index = _one_mac()
    ceiling = mac_ceiling_bytes(index.mac("studio"), CONFIG.memory)
    estimate = estimate_job_memory(LLAMA_70B_4BIT, CONTEXT, CONFIG.memory)
    assert 2 * estimate.total_bytes > ceiling > estimate.total_bytes
    placed = []
    for n in range(8):
        decision = place(job(LLAMA_70B_4BIT, CONTEXT, name=f"llama-{n}"), index)
        if not isinstance(decision, Placement):
            assert decision.explanation.filtered_count(FilterReason.DOES_NOT_FIT) == 1
            break
        assert index.try_commit(decision)
        placed.append(decision)
    own_part = estimate.total_bytes - estimate.batch_shared_bytes
    assert len(placed) == 1 + (ceiling - estimate.total_bytes) // own_part > 1
    assert index.commitment("studio")[0] == estimate.total_bytes + (len(placed) - 1) * own_part <= ceiling


def test_another_model_shares_nothing() -> None:
    _, index = _one_mac()
    llama = must_place(place(job(LLAMA_70B_4BIT, CONTEXT, name="llama"), index))
    assert index.try_commit(llama)
    qwen = estimate_job_memory(QWEN3_4B_4BIT, CONTEXT, CONFIG.memory)
    decision = must_place(place(job(QWEN3_4B_4BIT, CONTEXT, name="qwen"), index))
    free_before = index.free_bytes("studio")
    assert index.try_commit(decision)
    assert free_before - index.free_bytes("studio") == qwen.total_bytes


def test_pod_jobs_share_nothing_with_the_members_own_jobs() -> None:
    fleet = Fleet(CONFIG)
    fleet.pod("desk", M4_MAX, 64, 2, LinkKind.RDMA_TB5, (LLAMA_70B_4BIT,))
    index = fleet.index()
    decision = must_place(place(JobRequest(JobId("long"), LLAMA_70B_4BIT, 131_072), index))  # too big for one member
    assert decision.pod_id == "desk" and decision.shared_memory_bytes == 0
    assert index.try_commit(decision)
    assert [index.commitment(node_id) for node_id in decision.node_ids] == [
        (share, 1, ()) for share in decision.reserved_memory_bytes]


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from((QWEN3_4B_4BIT, LLAMA_70B_4BIT)), st.sampled_from((1024, 8192, 32768)),
                          st.booleans()), min_size=1, max_size=24),
       st.randoms(use_true_random=False))
def test_a_macs_commitment_is_each_running_models_shared_part_once_plus_each_jobs_own(steps, random) -> None:
    """Over random arrivals and departures: the commitment is exactly the model-once sum, it never
    passes the ceiling, and the index and the exhaustive search keep making the same decision."""
    fleet, index = _one_mac(memory_gib=128, slots=6)
    ceiling = mac_ceiling_bytes(index.mac("studio"), CONFIG.memory)
    running: list[Placement] = []
    for n, (spec, context, leave) in enumerate(steps):
        if leave and running:
            index.release(running.pop(random.randrange(len(running))))
        request = job(spec, context, name=f"job-{n}")
        decision = place(request, index)
        assert comparable(decision) == comparable(place_exhaustive(request, index.snapshot(), CONFIG))
        if isinstance(decision, Placement):
            assert index.try_commit(decision)
            running.append(decision)
        committed, jobs, shared = index.commitment("studio")
        expected = sum(p.reserved_memory_bytes[0] - p.shared_memory_bytes for p in running) + sum(
            max(p.shared_memory_bytes for p in running if p.model_id == model_id)
            for model_id in {p.model_id for p in running})
        assert committed == expected <= ceiling
        assert jobs == len(running)
        assert shared == tuple(sorted((model_id, max(p.shared_memory_bytes for p in running if p.model_id == model_id),
                                       sum(1 for p in running if p.model_id == model_id))
                                      for model_id in {p.model_id for p in running}))
        assert FleetIndex.build(index.snapshot(), CONFIG).commitment("studio") == (committed, jobs, shared)
