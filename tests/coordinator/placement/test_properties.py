"""Property tests: capacity is never exceeded, filtered candidates never chosen, decisions are
deterministic, single Macs come first, and the index agrees with the exhaustive search."""

from __future__ import annotations

import itertools
from bisect import bisect_left
from dataclasses import replace

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from contracts.hardware import LinkKind
from contracts.ids import JobId, NodeId
from coordinator.placement import (
    FleetIndex, FleetSnapshot, JobRequest, LendingMode, MacCandidate, Placement, PlacementConfig, PodCandidate,
    PodLink, Strategy, place, place_exhaustive,
)
from coordinator.placement.exhaustive import ExhaustiveView
from coordinator.placement.filters import mac_state_reason
from coordinator.placement.index import FREE_SHIFT, commit_shared, move_key, shared_dict, shared_tuple
from coordinator.placement.memory import estimate_job_memory, held_for_model, mac_ceiling_bytes
from coordinator.placement.speed import SpeedProfile, decode_tokens_per_s, effective_bandwidth_step
from coordinator.placement.terms import job_terms
from tests.coordinator.placement.harness import (
    GIB, LLAMA_70B_4BIT, M3_ULTRA, M4, M4_MAX, M4_PRO, QWEN3_4B_4BIT, hardware, model,
)
from tests.coordinator.placement.test_decisions import comparable

BIG_MODEL = model("big-300b", 300e9, 4.5, 60, 64, 8)
HUGE_MODEL = model("huge-900b", 900e9, 4.5, 61, 64, 8)  # about 530 GB: only a pod can hold it
MODELS = (QWEN3_4B_4BIT, LLAMA_70B_4BIT, BIG_MODEL, HUGE_MODEL)
CHIPS = ((M4, (16, 24, 32)), (M4_PRO, (24, 48, 64)), (M4_MAX, (36, 64, 128)), (M3_ULTRA, (96, 256, 512)))
STUDIOS = ((M4_MAX, (128,)), (M3_ULTRA, (256, 512)))
CONFIG = PlacementConfig()
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def macs(draw, name: str, chips=CHIPS) -> MacCandidate:
    chip, sizes = draw(st.sampled_from(chips))
    mode = draw(st.sampled_from(LendingMode))
    probe = MacCandidate(NodeId(name), hardware(chip, draw(st.sampled_from(sizes))), True, 0, 0, 1, frozenset(),
                         mode=mode, memory_cap_bytes=draw(st.none() | st.integers(4, 400).map(lambda g: g * GIB)))
    ceiling = mac_ceiling_bytes(probe, CONFIG.memory)
    served = draw(st.frozensets(st.sampled_from([m.model_id for m in MODELS]), min_size=1))
    max_jobs = draw(st.integers(1, 3))
    running = draw(st.integers(0, max_jobs))
    # Some of its running jobs may be of models it serves, sharing their weights (held once).
    sharing = sorted(draw(st.frozensets(st.sampled_from(sorted(served)), max_size=running)))
    shared = tuple((model_id, _shared_bytes(model_id), 1) for model_id in sharing)
    held = sum(bytes_ for _, bytes_, _ in shared)
    return replace(
        probe, online=draw(st.sampled_from((True, True, True, False))),
        owner_active=draw(st.sampled_from((False, False, False, True))),
        committed_memory_bytes=held + draw(st.integers(0, max(ceiling - held, 0))), running_jobs=running,
        shared_memory=shared, max_concurrent_jobs=max_jobs, served_models=served,
        warm_models=draw(st.frozensets(st.sampled_from(sorted(served)))),
        reputation=draw(st.sampled_from((1.0, 0.9, 0.75))), price_per_million_tokens=draw(st.sampled_from((0, 300_000, 900_000))),
        measured_bandwidth_gb_s=draw(st.none() | st.floats(80, 900)),
        # Measured batch speeds, or none (the conservative default): a busy Mac is slower per job.
        batch_decode_tokens_per_s=draw(st.sampled_from(((), ((1, 90.0), (2, 139.0), (4, 143.6), (8, 236.8)),
                                                        ((1, 50.0), (2, 100.0)), ((1, 40.0), (2, 30.0))))))


def _shared_bytes(model_id: str) -> int:
    """What a job of this model shares with the Mac's other jobs of it, as placement estimates it."""
    spec = next(m for m in MODELS if m.model_id == model_id)
    return estimate_job_memory(spec, 1024, CONFIG.memory).batch_shared_bytes


@st.composite
def mixed_fleets(draw, singles_max: int = 10, pods_max: int = 2) -> FleetSnapshot:
    singles = [draw(macs(f"mac-{i}")) for i in range(draw(st.integers(1, singles_max)))]
    pod_macs, pods = [], []
    for p in range(draw(st.integers(0, pods_max))):
        size = draw(st.sampled_from((2, 3, 4, 4)))
        pod_models = frozenset({BIG_MODEL.model_id, HUGE_MODEL.model_id, QWEN3_4B_4BIT.model_id})
        studio = draw(st.sampled_from(STUDIOS + (STUDIOS,)))  # usually identical members, sometimes mixed
        chips = studio if isinstance(studio[0], tuple) else (studio,)
        members = [replace(draw(macs(f"pod-{p}-{i}", chips)), served_models=pod_models, online=True,
                           mode=LendingMode.DEDICATED, memory_cap_bytes=None, running_jobs=0, shared_memory=(),
                           owner_active=draw(st.sampled_from((False,) * 9 + (True,))),
                           committed_memory_bytes=draw(st.sampled_from((0, 0, 40 * GIB))))
                   for i in range(size)]
        kind = draw(st.sampled_from((LinkKind.RDMA_TB5,) * 2 + tuple(LinkKind)))
        ids = tuple(m.node_id for m in members)
        pairs = list(itertools.combinations(ids, 2))
        pods.append(PodCandidate(f"pod-{p}", ids, tuple(PodLink(a, b, kind) for a, b in pairs)))
        pod_macs += members
    return FleetSnapshot(tuple(singles + pod_macs), tuple(pods))


# Mostly Macs; or a few Macs and up to three pods, where the big models land.
fleets = lambda: st.one_of(mixed_fleets(), mixed_fleets(singles_max=3, pods_max=3))  # noqa: E731


def _job(i: int, spec, context: int, speed: float) -> JobRequest:
    return JobRequest(JobId(f"job-{i}"), spec, context, speed)


jobs = st.one_of(
    st.builds(_job, st.integers(0, 10**6), st.sampled_from(MODELS), st.sampled_from((1024, 8192, 65536)),
              st.sampled_from((0.0, 0.0, 5.0, 20.0, 60.0, 200.0))),
    st.builds(_job, st.integers(0, 10**6), st.sampled_from((BIG_MODEL, HUGE_MODEL)), st.sampled_from((1024, 8192)),
              st.sampled_from((0.0, 5.0, 12.0))))


def _check_members_were_feasible(decision: Placement, snapshot: FleetSnapshot, job: JobRequest) -> None:
    by_id = {mac.node_id: mac for mac in snapshot.macs}
    for node_id, share in zip(decision.node_ids, decision.reserved_memory_bytes):
        mac = by_id[node_id]
        assert mac_state_reason(mac) is None, f"{node_id} was {mac_state_reason(mac)}"
        assert job.model.model_id in mac.served_models
        # What the Mac's running jobs of the model already hold (weights, runtime) the job shares.
        held = held_for_model(mac, job.model.model_id) if decision.pod_id is None else 0
        assert share - min(held, decision.shared_memory_bytes) <= mac_ceiling_bytes(mac, CONFIG.memory) \
            - mac.committed_memory_bytes
    assert decision.predicted_decode_tokens_per_s >= job.min_decode_tokens_per_s
    if decision.strategy is Strategy.SINGLE:
        step = effective_bandwidth_step(by_id[decision.node_ids[0]], CONFIG.speed)
        terms = job_terms(job, CONFIG)
        assert decode_tokens_per_s(SpeedProfile(step), terms.bytes_per_token, CONFIG.speed) >= job.min_decode_tokens_per_s


@SETTINGS
@given(fleets(), st.lists(jobs, min_size=1, max_size=12))
def test_commitments_never_exceed_capacity_and_filtered_candidates_are_never_chosen(snapshot, requests) -> None:
    index = FleetIndex.build(snapshot, CONFIG)
    start = {mac.node_id: mac.committed_memory_bytes for mac in snapshot.macs}
    for request in requests:
        current = index.snapshot()
        decision = place(request, index)
        event(f"decision: {decision.strategy if isinstance(decision, Placement) else 'unplaceable'}")
        if not isinstance(decision, Placement):
            continue
        _check_members_were_feasible(decision, current, request)
        assert index.try_commit(decision), "a fresh decision must commit"
        for mac in index.snapshot().macs:
            ceiling = mac_ceiling_bytes(mac, CONFIG.memory)
            # Commitments only grow where the planner put them, and never past the ceiling.
            assert mac.committed_memory_bytes <= max(ceiling, start[mac.node_id])
            assert mac.committed_memory_bytes == start[mac.node_id] or mac.committed_memory_bytes <= ceiling


@SETTINGS
@given(fleets(), st.lists(jobs, min_size=1, max_size=8))
def test_committing_through_snapshots_matches_committing_through_the_index(snapshot, requests) -> None:
    """The coordinator's way (a new snapshot after each commit) and the index's way agree."""
    index = FleetIndex.build(snapshot, CONFIG)
    for request in requests:
        by_snapshot, by_index = place(request, snapshot, CONFIG), place(request, index)
        assert comparable(by_snapshot) == comparable(by_index)
        if isinstance(by_index, Placement):
            assert index.try_commit(by_index)
            shares = dict(zip(by_index.node_ids, by_index.reserved_memory_bytes))
            snapshot = replace(snapshot, macs=tuple(
                _committed(m, by_index, shares[m.node_id]) if m.node_id in shares else m for m in snapshot.macs))
        assert index.snapshot() == snapshot


def _committed(mac: MacCandidate, placement: Placement, share: int) -> MacCandidate:
    """The Mac after the job's commit, as the database would read it back."""
    added, shared = commit_shared(shared_dict(mac.shared_memory), placement.model_id, share,
                                  placement.shared_memory_bytes)
    return replace(mac, committed_memory_bytes=mac.committed_memory_bytes + added, running_jobs=mac.running_jobs + 1,
                   shared_memory=shared_tuple(shared))


@SETTINGS
@given(fleets(), jobs)
def test_same_snapshot_and_job_give_the_same_decision(snapshot, request) -> None:
    first = place(request, snapshot, CONFIG)
    rebuilt = FleetSnapshot(tuple(replace(m) for m in snapshot.macs), snapshot.pods)  # a new object: no cache
    assert place(request, rebuilt, CONFIG) == first
    assert place(request, FleetIndex.build(snapshot, CONFIG)) == first


@SETTINGS
@given(fleets(), jobs, st.booleans())
def test_a_job_a_single_mac_can_take_never_goes_to_a_pod(snapshot, request, reserve_pods) -> None:
    config = replace(CONFIG, reserve_pods_for_jobs_no_mac_can_take=reserve_pods)
    decision = place(request, snapshot, config)
    if not isinstance(decision, Placement) or decision.pod_id is None:
        return
    view, terms = ExhaustiveView(snapshot, config), job_terms(request, config)
    assert not view.search_macs(terms).top, "a single Mac could take it now at the needed speed"
    if reserve_pods:
        assert not view.single_could_ever_take(terms), "a single Mac could take it when free"


@SETTINGS
@given(fleets(), jobs)
def test_index_and_exhaustive_search_make_the_same_decision(snapshot, request) -> None:
    assert comparable(place(request, snapshot, CONFIG)) == comparable(place_exhaustive(request, snapshot, CONFIG))


@SETTINGS
@given(fleets(), st.lists(jobs, min_size=2, max_size=10), st.randoms(use_true_random=False))
def test_the_index_after_commits_and_releases_equals_a_fresh_index(snapshot, requests, random) -> None:
    index = FleetIndex.build(snapshot, CONFIG)
    running = []
    for request in requests:
        decision = place(request, index)
        if isinstance(decision, Placement) and index.try_commit(decision):
            running.append(decision)
        if running and random.random() < 0.4:
            index.release(running.pop(random.randrange(len(running))))
    fresh = FleetIndex.build(index.snapshot(), CONFIG)
    probe = requests[-1]
    assert place(probe, index) == place(probe, fresh)


@SETTINGS
@given(fleets(), st.lists(jobs, min_size=2, max_size=10), st.randoms(use_true_random=False))
def test_remembered_fit_starts_stay_equal_to_fresh_bisects(snapshot, requests, random) -> None:
    """Each model's remembered fit starts, kept current through commits and releases, equal a fresh bisect."""
    index = FleetIndex.build(snapshot, CONFIG)
    running = []
    for request in requests * 2:  # each job size comes back after the index has changed
        decision = place(request, index)
        if isinstance(decision, Placement) and index.try_commit(decision):
            running.append(decision)
        if running and random.random() < 0.4:
            index.release(running.pop(random.randrange(len(running))))
    remembered = 0
    for entry in index.mac_models.values():
        assert entry.fit_needs == sorted(entry.fit_starts)
        assert all(a is b for a, b in zip(entry.fit_starts_by_need, (entry.fit_starts[n] for n in entry.fit_needs)))
        assert len(entry.fit_starts_by_need) == len(entry.fit_needs)
        for need_bytes, starts in entry.fit_starts.items():
            frees = [[key >> FREE_SHIFT for key in keys] for keys in entry.mac_keys]
            assert starts == [bisect_left(free, need_bytes) for free in frees]
            remembered += 1
    event("job sizes remembered: " + ("4 or more" if remembered >= 4 else str(remembered)))


def _filed(index: FleetIndex) -> dict:
    """Every group's keys and every model's unavailable counts, Mac and pod, by model and class."""
    filed = {}
    for kind, models in (("mac", index.mac_models), ("pod", index.pod_models)):
        for model_id, entry in models.items():
            filed[kind, model_id, "unavailable"] = {reason: n for reason, n in entry.unavailable.items() if n}
            for class_key, item in entry.classes.items():
                groups = (item.cold, item.warm) if kind == "mac" else (item.group,)
                if any(group.keys for group in groups):  # a class a busy Mac passed through stays, empty
                    filed[kind, model_id, class_key] = [list(group.keys) for group in groups]
    return filed


@SETTINGS
@given(fleets(), st.lists(jobs, min_size=2, max_size=10), st.randoms(use_true_random=False))
def test_keys_moved_through_commits_and_releases_equal_a_fresh_filing(snapshot, requests, random) -> None:
    """Commits and releases move Mac and pod keys in place; what is filed equals a fresh index's filing."""
    index = FleetIndex.build(snapshot, CONFIG)
    running = []
    for request in requests * 2:
        decision = place(request, index)
        if isinstance(decision, Placement) and index.try_commit(decision):
            running.append(decision)
        if running and random.random() < 0.4:
            index.release(running.pop(random.randrange(len(running))))
    fresh = FleetIndex.build(index.snapshot(), CONFIG)  # no Mac left, so positions are the same
    assert _filed(index) == _filed(fresh)
    for pod in index.pod_slots:
        if pod is not None and pod.reason is None:
            assert pod.filed_free == index.pod_free_sum(pod)
            assert pod.smallest_free == min(member.free for member in pod.members)


@SETTINGS
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=40, unique=True), st.integers(0, 10**6),
       st.integers(0, 10**6))
def test_moving_a_key_keeps_the_list_sorted_with_only_that_key_changed(values, pick, new_key) -> None:
    keys = sorted(values)
    old_key = keys[pick % len(keys)]
    assume(new_key == old_key or new_key not in keys)  # keys are unique: they end in the candidate's position
    move_key(keys, old_key, new_key)
    assert keys == sorted(set(values) - {old_key} | {new_key})
