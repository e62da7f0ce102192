"""A re-run's excluded nodes: a named filter on the live index for one decision, undone after it."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given
from hypothesis import strategies as st

from contracts.hardware import LinkKind
from coordinator.placement import FleetIndex, FleetSnapshot, Placement, place
from coordinator.placement.filters import FilterReason
from coordinator.placement.index import FREE_SHIFT
from coordinator.placement.vocabulary import CandidateKind
from tests.coordinator.placement.harness import (
    LLAMA_70B_4BIT, M3_ULTRA, M4_MAX, M4_PRO, QWEN3_4B_4BIT, Fleet, job, must_place, must_refuse,
)
from tests.coordinator.placement.test_properties import CONFIG, SETTINGS, _filed, fleets, jobs


def test_an_excluded_mac_is_counted_by_name_and_the_next_best_is_chosen() -> None:
    fleet = Fleet()
    macs = {fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,)), fleet.mac(M4_PRO, 48, (QWEN3_4B_4BIT,))}
    index = fleet.index()
    (first,) = must_place(place(job(QWEN3_4B_4BIT), index)).node_ids
    rerun = must_place(place(job(QWEN3_4B_4BIT), index, excluded=frozenset({first})))
    assert rerun.node_ids == tuple(macs - {first})
    assert rerun.explanation.filtered_count(FilterReason.EXCLUDED) == 1
    assert rerun.explanation.to_dict()["macs"]["filtered"] == {"failed_this_job": 1}
    assert must_place(place(job(QWEN3_4B_4BIT), index)).node_ids == (first,)  # readmitted after the decision


def test_a_job_only_excluded_nodes_could_ever_take_is_refused_not_kept_waiting() -> None:
    fleet = Fleet()
    only = fleet.mac(M3_ULTRA, 192, (LLAMA_70B_4BIT,))
    fleet.mac(M4_PRO, 24, (LLAMA_70B_4BIT,))  # serves it, but could never hold it
    index = fleet.index()
    refused = must_refuse(place(job(LLAMA_70B_4BIT), index, excluded=frozenset({only})))
    assert refused.permanent
    assert must_place(place(job(LLAMA_70B_4BIT), index)).node_ids == (only,)


def test_a_pod_with_an_excluded_member_is_filtered_out_with_it() -> None:
    fleet = Fleet()
    members = fleet.pod("pod-a", M3_ULTRA, 512, 2, LinkKind.RDMA_TB5, (LLAMA_70B_4BIT,), running_jobs=0)
    index = fleet.index()
    # A single member takes the job; with both excluded, the pod is counted as excluded too.
    refused = place(job(LLAMA_70B_4BIT), index, excluded=frozenset(members))
    must_refuse(refused)
    assert refused.explanation.filtered_count(FilterReason.EXCLUDED) == 2
    assert refused.explanation.filtered_count(FilterReason.EXCLUDED, CandidateKind.POD) == 1


def _fit_starts_are_fresh(index: FleetIndex) -> None:
    for entry in index.mac_models.values():
        for need_bytes, starts in entry.fit_starts.items():
            frees = [[key >> FREE_SHIFT for key in keys] for keys in entry.mac_keys]
            assert starts == [bisect_left(free, need_bytes) for free in frees]


def _ceilings(index: FleetIndex) -> dict:
    found = {}
    for kind, models in (("mac", index.mac_models), ("pod", index.pod_models)):
        for model_id, entry in models.items():
            for class_key, item in entry.classes.items():
                found[kind, model_id, class_key] = list(item.ceilings if kind == "mac" else item.by_ceiling)
    return found


def _without(snapshot: FleetSnapshot, excluded: frozenset[str]) -> FleetSnapshot:
    return FleetSnapshot(tuple(m for m in snapshot.macs if m.node_id not in excluded),
                         tuple(p for p in snapshot.pods if not excluded & set(p.members)))


def _chosen(decision) -> tuple:  # type: ignore[no-untyped-def]
    return decision.node_ids if isinstance(decision, Placement) else ("waits", decision.permanent)


@SETTINGS
@given(fleets(), st.lists(jobs, min_size=1, max_size=8), st.data())
def test_excluding_on_the_live_index_chooses_as_a_fleet_without_them_and_leaves_it_as_it_was(
        snapshot, requests, data) -> None:
    index = FleetIndex.build(snapshot, CONFIG)
    for request in requests:
        place(request, index)  # remembered fit starts, kept through the exclusion
    filed, ceilings = _filed(index), _ceilings(index)
    names = sorted(mac.node_id for mac in snapshot.macs)
    for request in requests:
        excluded = frozenset(data.draw(st.lists(st.sampled_from(names), max_size=3)))
        decision = place(request, index, excluded=excluded)
        assert not set(_chosen(decision)) & excluded
        assert _chosen(decision) == _chosen(place(request, _without(snapshot, excluded), CONFIG))
        assert _filed(index) == filed and _ceilings(index) == ceilings
        _fit_starts_are_fresh(index)
