"""Harness tests: filters and their named reasons, waiting versus refusing, pods kept for big jobs,
and the index kept current by commit, release and heartbeats."""

from __future__ import annotations

from dataclasses import replace

from contracts.hardware import LinkKind
from contracts.ids import NodeId
from coordinator.placement import (
    FilterReason, LendingMode, PlacementConfig, PodCandidate, PodLink, Strategy, place, place_exhaustive,
)
from tests.coordinator.placement.harness import (
    GIB, KIMI_K2_4BIT, KIMI_K2_ACTIVE_BYTES, LLAMA_70B_4BIT, M3_ULTRA, M4, M4_MAX, M4_PRO, QWEN3_4B_4BIT, Fleet,
    job, model, must_place, must_refuse,
)


def test_each_filter_names_its_reason() -> None:
    fleet = Fleet()
    fleet.mac(M4_PRO, 48, (QWEN3_4B_4BIT,), online=False)
    fleet.mac(M4_PRO, 48, (QWEN3_4B_4BIT,), owner_active=True)
    fleet.mac(M4_PRO, 48, (QWEN3_4B_4BIT,), running_jobs=2, max_concurrent_jobs=2)
    fleet.mac(M4_PRO, 48, (LLAMA_70B_4BIT,))
    fleet.mac(M4, 16, (QWEN3_4B_4BIT,))  # about 21 tok/s: below the 30 asked for
    fleet.mac(M4_PRO, 48, (QWEN3_4B_4BIT,), committed_memory_bytes=34 * GIB)  # 2 GiB left
    winner = fleet.mac(M4_PRO, 48, (QWEN3_4B_4BIT,))
    placement = must_place(fleet.place(job(QWEN3_4B_4BIT, min_speed=30)))
    assert placement.node_ids == (winner,)
    assert dict(placement.explanation.mac_filtered) == {
        FilterReason.OFFLINE: 1, FilterReason.OWNER_ACTIVE: 1, FilterReason.BUSY: 1,
        FilterReason.MODEL_NOT_SERVED: 1, FilterReason.BELOW_MIN_SPEED: 1, FilterReason.DOES_NOT_FIT: 1}
    assert placement.explanation.macs_feasible == 1


def test_too_big_for_every_mac_even_idle_is_refused_for_good() -> None:
    fleet = Fleet()
    fleet.mac(M4_MAX, 64, (LLAMA_70B_4BIT,), committed_memory_bytes=10 * GIB)
    fleet.mac(M4_PRO, 24, (LLAMA_70B_4BIT,))
    refusal = must_refuse(fleet.place(job(LLAMA_70B_4BIT, context_tokens=32768)))
    assert refusal.permanent and "even when idle" in refusal.reason


def test_fits_when_free_but_busy_now_waits() -> None:
    fleet = Fleet()
    node = fleet.mac(M4_MAX, 64, (LLAMA_70B_4BIT,), committed_memory_bytes=20 * GIB)
    refusal = must_refuse(fleet.place(job(LLAMA_70B_4BIT)))
    assert not refusal.permanent and "waits" in refusal.reason
    assert refusal.explanation.filtered_count(FilterReason.DOES_NOT_FIT) == 1
    fleet.update(node, committed_memory_bytes=0)
    assert must_place(fleet.place(job(LLAMA_70B_4BIT))).node_ids == (node,)


def test_offline_and_owner_active_macs_are_temporary() -> None:
    fleet = Fleet()
    fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,), online=False)
    fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,), owner_active=True)
    assert not must_refuse(fleet.place(job(QWEN3_4B_4BIT))).permanent


def test_a_model_nobody_serves_is_refused_for_good() -> None:
    fleet = Fleet()
    fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,))
    refusal = must_refuse(fleet.place(job(LLAMA_70B_4BIT)))
    assert refusal.permanent and refusal.reason == "No Mac or pod in the network serves llama-70b-4bit."
    assert refusal.explanation.filtered_count(FilterReason.MODEL_NOT_SERVED) == 1


def test_a_speed_no_mac_or_pod_can_reach_is_refused_for_good() -> None:
    fleet = Fleet()
    fleet.mac(M3_ULTRA, 512, (LLAMA_70B_4BIT,))
    assert must_refuse(fleet.place(job(LLAMA_70B_4BIT, min_speed=500))).permanent


def test_pods_are_kept_for_jobs_no_single_mac_can_take() -> None:
    fleet = Fleet()
    # 70B at 32k tokens needs about 56 GB: an idle 128 GB M4 Max could take it, but it is busy now;
    # a pod of two 64 GB Studios (48 GiB each for the network) could take it now.
    fleet.mac(M4_MAX, 128, (LLAMA_70B_4BIT,), committed_memory_bytes=60 * GIB)
    fleet.pod("studios", M4_MAX, 64, 2, LinkKind.RDMA_TB5, (LLAMA_70B_4BIT,))
    request = job(LLAMA_70B_4BIT, context_tokens=32768)
    waiting = must_refuse(fleet.place(request))
    assert not waiting.permanent and not waiting.explanation.pods_considered
    assert "pods are kept" in waiting.explanation.notes[0]
    fleet.config = PlacementConfig(reserve_pods_for_jobs_no_mac_can_take=False)
    placement = must_place(fleet.place(request))
    assert placement.pod_id == "studios" and placement.strategy is Strategy.TENSOR


def test_a_pod_wins_only_with_a_speed_no_single_mac_reaches() -> None:
    fleet = Fleet()
    fleet.mac(M4_MAX, 128, (LLAMA_70B_4BIT,))
    fleet.pod("studios", M3_ULTRA, 512, 4, LinkKind.RDMA_TB5, (LLAMA_70B_4BIT,))
    # Slow is fine: a single Mac (the M4 Max has the tightest fit).
    single = must_place(fleet.place(job(LLAMA_70B_4BIT, min_speed=5)))
    assert single.strategy is Strategy.SINGLE and single.pod_id is None
    # 20 tok/s: an Ultra alone reaches about 10, four in tensor parallel about 32.
    fast = must_place(fleet.place(job(LLAMA_70B_4BIT, min_speed=20)))
    assert fast.strategy is Strategy.TENSOR and fast.pod_id == "studios"
    assert fast.explanation.filtered_count(FilterReason.BELOW_MIN_SPEED) == 5


def test_pod_members_must_all_be_available() -> None:
    fleet = Fleet()
    members = fleet.pod("studios", M3_ULTRA, 512, 4, LinkKind.RDMA_TB5, (KIMI_K2_4BIT,))
    kimi = job(KIMI_K2_4BIT, active_weights_bytes=KIMI_K2_ACTIVE_BYTES)
    assert must_place(fleet.place(kimi)).pod_id == "studios"
    fleet.update(members[2], owner_active=True)
    refusal = must_refuse(fleet.place(kimi))
    assert not refusal.permanent
    assert refusal.explanation.filtered_count(FilterReason.OWNER_ACTIVE, kind="pod") == 1


def test_tensor_parallel_needs_heads_divisible_by_members() -> None:
    odd_heads = model("odd-heads-600b", 1.0e12, 4.5, 60, 60, 6)  # 60 heads do not split over 8... but do over 4
    fleet = Fleet()
    fleet.pod("three", M3_ULTRA, 512, 3, LinkKind.RDMA_TB5, (odd_heads,))
    assert must_place(fleet.place(job(odd_heads))).strategy is Strategy.TENSOR
    seven_heads = model("seven-heads-600b", 1.0e12, 4.5, 63, 63, 7)
    fleet = Fleet()
    fleet.pod("two", M3_ULTRA, 512, 2, LinkKind.RDMA_TB5, (seven_heads,))
    placement = must_place(fleet.place(job(seven_heads)))
    assert placement.strategy is Strategy.PIPELINE and sum(placement.layer_split) == 63


def test_pipeline_splits_unequal_members_by_memory() -> None:
    spec = model("three-quarter-t", 0.75e12, 4.5, 61, 64, 8)  # about 440 GB: more than one Ultra gives
    fleet = Fleet()
    a = fleet.mac(M3_ULTRA, 512, (spec,), name="big", mode=LendingMode.DEDICATED)
    b = fleet.mac(M3_ULTRA, 256, (spec,), name="small", mode=LendingMode.DEDICATED)
    fleet.pods.append(PodCandidate("mixed", (a, b), (PodLink(a, b, LinkKind.TCP_THUNDERBOLT),)))
    placement = must_place(fleet.place(job(spec)))
    assert placement.strategy is Strategy.PIPELINE
    assert placement.layer_split == (41, 20)  # in proportion to the 384 and 192 GiB each can give
    free = [fleet.index().free_bytes(node) for node in placement.node_ids]
    assert all(share <= f for share, f in zip(placement.reserved_memory_bytes, free))


def test_ties_break_by_the_job_id_and_spread_over_identical_macs() -> None:
    fleet = Fleet()
    nodes = [fleet.mac(M4_PRO, 48, (QWEN3_4B_4BIT,)) for _ in range(8)]
    index = fleet.index()
    chosen = {place(job(QWEN3_4B_4BIT, name=f"job-{i}"), index).node_ids[0] for i in range(40)}
    assert len(chosen) > 3 and chosen <= set(nodes)
    again = {place(job(QWEN3_4B_4BIT, name=f"job-{i}"), fleet.index()).node_ids[0] for i in range(40)}
    assert again == chosen


def test_ties_across_speed_classes_pick_as_the_exhaustive_search_does() -> None:
    # Both chips run a 4B model past the comfortable pace, so their speed scores saturate and
    # identical Macs of the two classes tie exactly: the pick is over the runs of both groups.
    fleet = Fleet()
    nodes = [fleet.mac(chip, 64, (QWEN3_4B_4BIT,)) for _ in range(5) for chip in (M4_MAX, M4_PRO)]
    index = fleet.index()
    chosen = set()
    for i in range(60):
        request = job(QWEN3_4B_4BIT, name=f"job-{i}")
        placement = must_place(place(request, index))
        assert placement.node_ids == must_place(place_exhaustive(request, fleet.snapshot())).node_ids
        chosen.add(placement.node_ids[0])
    assert chosen == set(nodes), "every tied Mac, of either class, is picked by some job id"


def test_commit_rechecks_capacity_and_release_gives_it_back() -> None:
    # Two models of one size: a job of the other model shares none of the first one's weights.
    other = replace(LLAMA_70B_4BIT, model_id="other-70b-4bit")
    fleet = Fleet()
    node = fleet.mac(M4_MAX, 64, (LLAMA_70B_4BIT, other), max_concurrent_jobs=3)
    index = fleet.index()
    first = must_place(place(job(LLAMA_70B_4BIT, name="job-a"), index))
    second = must_place(place(job(other, name="job-b"), index))  # decided on the same state
    assert index.try_commit(first)
    assert not index.try_commit(second), "the memory went to the first job"
    assert index.mac(node).committed_memory_bytes == first.reserved_memory_bytes[0]
    assert not must_refuse(place(job(other, name="job-c"), index)).permanent
    index.release(first)
    assert index.free_bytes(node) == 48 * GIB
    assert must_place(place(job(LLAMA_70B_4BIT, name="job-c"), index)).node_ids == (node,)


def test_heartbeats_update_the_index() -> None:
    fleet = Fleet()
    node = fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,))
    index = fleet.index()
    index.replace_mac(replace(index.mac(node), online=False))
    assert not must_refuse(place(job(QWEN3_4B_4BIT), index)).permanent
    index.replace_mac(replace(index.mac(node), online=True, served_models=frozenset({"other"})))
    assert must_refuse(place(job(QWEN3_4B_4BIT), index)).permanent
    newcomer = replace(index.mac(node), node_id=NodeId("node-new"), served_models=frozenset({"qwen3-4b-4bit"}))
    index.replace_mac(newcomer)
    assert must_place(place(job(QWEN3_4B_4BIT), index)).node_ids == ("node-new",)
    assert index.snapshot().macs[-1] == newcomer


def test_index_and_exhaustive_search_agree_on_a_mixed_fleet() -> None:
    fleet = Fleet()
    for i, (chip, memory) in enumerate([(M4, 16), (M4_PRO, 24), (M4_PRO, 48), (M4_MAX, 64), (M4_MAX, 128),
                                        (M3_ULTRA, 256), (M3_ULTRA, 512)] * 3):
        fleet.mac(chip, memory, (QWEN3_4B_4BIT, LLAMA_70B_4BIT), reputation=0.7 + 0.1 * (i % 4),
                  price_per_million_tokens=100_000 * (i % 5), warm_models=frozenset({"qwen3-4b-4bit"} if i % 3 else set()),
                  committed_memory_bytes=(i % 4) * GIB)
    fleet.pod("studios", M3_ULTRA, 512, 4, LinkKind.RDMA_TB5, (KIMI_K2_4BIT,))
    snapshot, index = fleet.snapshot(), fleet.index()
    for i, (spec, context, speed) in enumerate([(QWEN3_4B_4BIT, 4096, 0), (QWEN3_4B_4BIT, 32768, 40),
                                                (LLAMA_70B_4BIT, 8192, 0), (LLAMA_70B_4BIT, 8192, 9),
                                                (KIMI_K2_4BIT, 4096, 0), (LLAMA_70B_4BIT, 131072, 0)]):
        request = job(spec, context, speed, name=f"job-{i}")
        assert comparable(place(request, index)) == comparable(place_exhaustive(request, snapshot))


def comparable(decision):
    """The exhaustive search scores every feasible candidate; the index only those that could win."""
    return replace(decision, explanation=replace(decision.explanation, macs_scored=0, pods_scored=0))
