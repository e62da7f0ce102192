"""A long-lived index kept current event by event equals an index built from scratch over the same facts."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from contracts.hardware import LinkKind
from contracts.ids import NodeId
from coordinator.placement import (
    FleetIndex, FleetSnapshot, MacCandidate, Placement, PodCandidate, PodLink, place,
)
from coordinator.placement.index_sync import apply_macs, apply_pods
from coordinator.placement.memory import mac_ceiling_bytes
from tests.coordinator.placement.harness import GIB, M4_MAX, QWEN3_4B_4BIT, hardware
from tests.coordinator.placement.test_decisions import comparable
from tests.coordinator.placement.test_properties import CONFIG, SETTINGS, MODELS, fleets, jobs, macs


def _live_pods(pods: tuple[PodCandidate, ...], facts: dict[NodeId, MacCandidate]) -> tuple[PodCandidate, ...]:
    """Declared pods whose members are all in the fleet, as the coordinator derives them."""
    return tuple(pod for pod in pods if all(member in facts for member in pod.members))


def _assert_same_as_rebuilt(live: FleetIndex, facts: dict[NodeId, MacCandidate],
                            pods: tuple[PodCandidate, ...], probes: list) -> None:
    assert {mac.node_id: mac for mac in live.snapshot().macs} == facts
    assert live.pods() == {pod.pod_id: pod for pod in pods}
    assert live.mac_count == len(facts) and live.pod_count == len(pods)
    fresh = FleetIndex.build(FleetSnapshot(tuple(facts.values()), pods), CONFIG)
    compacted = FleetIndex.build(live.snapshot(), CONFIG)  # same facts, same relative positions
    for job in probes:
        by_live, by_fresh = place(job, live), place(job, fresh)
        # Pruning bounds only ever loosen in a long-lived index, so how many were scored may differ.
        assert comparable(by_live) == comparable(place(job, compacted))
        # Positions differ from a fresh build, so exact ties may go to another Mac; nothing else may differ.
        assert type(by_live) is type(by_fresh)
        assert by_live.explanation.mac_filtered == by_fresh.explanation.mac_filtered
        assert by_live.explanation.pod_filtered == by_fresh.explanation.pod_filtered
        assert by_live.explanation.macs_feasible == by_fresh.explanation.macs_feasible
        if isinstance(by_live, Placement):
            assert by_live.score == by_fresh.score and by_live.strategy == by_fresh.strategy
        else:
            assert by_live.permanent == by_fresh.permanent


@st.composite
def changed_mac(draw, mac: MacCandidate) -> MacCandidate:
    """A heartbeat or re-registration: state, load, models, reputation or the memory cap change."""
    ceiling = max(mac_ceiling_bytes(mac, CONFIG.memory), 0)
    served = draw(st.sampled_from((mac.served_models, frozenset(m.model_id for m in MODELS),
                                   frozenset({QWEN3_4B_4BIT.model_id}))))
    running = draw(st.integers(0, mac.max_concurrent_jobs))
    # The jobs sharing a model's weights went with the jobs, or some are still there.
    shared = mac.shared_memory if sum(jobs for _, _, jobs in mac.shared_memory) <= running else ()
    return replace(
        mac, online=draw(st.booleans()), owner_active=draw(st.sampled_from((False, False, True))),
        committed_memory_bytes=draw(st.sampled_from((0, mac.committed_memory_bytes, ceiling // 2))),
        running_jobs=running, shared_memory=shared, served_models=served,
        warm_models=draw(st.frozensets(st.sampled_from(sorted(served)))),
        reputation=draw(st.sampled_from((mac.reputation, 0.5))),
        memory_cap_bytes=draw(st.sampled_from((mac.memory_cap_bytes, None, 20 * GIB))))


EVENTS = ("change", "change", "leave", "join", "commit", "commit", "release")


@SETTINGS
@given(fleets(), st.lists(st.tuples(st.sampled_from(EVENTS), st.integers(0, 10**6)), min_size=1, max_size=14),
       st.lists(jobs, min_size=1, max_size=3), st.data())
def test_an_index_kept_current_event_by_event_equals_one_rebuilt_from_scratch(
        snapshot, events, probes, data) -> None:
    declared = snapshot.pods
    facts = {mac.node_id: mac for mac in snapshot.macs}
    live = FleetIndex.build(snapshot, CONFIG)
    running: list[Placement] = []
    for step, (kind, pick) in enumerate(events):
        node_ids = sorted(facts)
        if kind == "change" and node_ids:
            node_id = node_ids[pick % len(node_ids)]
            facts[node_id] = data.draw(changed_mac(facts[node_id]))
            # A Mac's own report replaces what the index knew, commitments included.
            running = [p for p in running if node_id not in p.node_ids]
            apply_macs(live, {node_id: facts[node_id]})
        elif kind == "leave" and node_ids:
            node_id = node_ids[pick % len(node_ids)]
            del facts[node_id]
            running = [p for p in running if node_id not in p.node_ids]
            assert apply_macs(live, {node_id: None})
        elif kind == "join":
            mac = data.draw(macs(f"joined-{step}"))
            facts[mac.node_id] = mac
            assert apply_macs(live, {mac.node_id: mac})
        elif kind == "commit":
            decision = place(jobs_at(probes, pick), live)
            if isinstance(decision, Placement) and live.try_commit(decision):
                running.append(decision)
                facts.update({node_id: live.mac(node_id) for node_id in decision.node_ids})
        elif kind == "release" and running:
            done = running.pop(pick % len(running))
            live.release(done)
            facts.update({node_id: live.mac(node_id) for node_id in done.node_ids})
        apply_pods(live, _live_pods(declared, facts))
    _assert_same_as_rebuilt(live, facts, _live_pods(declared, facts), probes)


def jobs_at(probes: list, pick: int):
    return probes[pick % len(probes)]


def test_a_mac_that_leaves_takes_its_pod_and_the_pod_returns_when_it_does() -> None:
    members = [MacCandidate(NodeId(f"studio-{i}"), hardware(M4_MAX, 128), True, 0, 0, 1,
                            frozenset({QWEN3_4B_4BIT.model_id})) for i in range(2)]
    pod = PodCandidate("desk", (members[0].node_id, members[1].node_id),
                       (PodLink(members[0].node_id, members[1].node_id, LinkKind.RDMA_TB5),))
    live = FleetIndex.build(FleetSnapshot(tuple(members), (pod,)), CONFIG)
    assert apply_macs(live, {members[1].node_id: None})
    assert live.pods() == {} and live.mac_count == 1
    apply_pods(live, (pod,) if live.has_mac(members[1].node_id) else ())
    assert live.pod_count == 0
    assert apply_macs(live, {members[1].node_id: members[1]})
    apply_pods(live, (pod,))
    assert live.pods() == {"desk": pod}
    assert live.pod_ids_of(members[0].node_id) == ("desk",)
    facts = {mac.node_id: mac for mac in members}
    _assert_same_as_rebuilt(live, facts, (pod,), [])
