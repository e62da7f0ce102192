"""FleetIndex: the fleet arranged so that one decision touches a few dozen candidates, not 100,000.

For each model, available Macs are grouped by speed profile (one bandwidth grid step)
and by whether the model is warm there. Each group is a list of integer keys sorted by free memory, then by static score
(warm model, reputation and price: fixed for a Mac and model) descending, then position:

    key = free_bytes << FREE_SHIFT | (SCALE - static_quantum) << STATIC_SHIFT | position

so "fits" is a bisect, and the best fits come first. Pods are grouped the same way by
topology and slowest member, keyed by summed free memory. Counters per model hold how
many Macs are offline, owner-active or busy, so an explanation's counts are exact.

The index is the one mutable structure of the planner; it is owned by one thread.
Decisions never change it: commit and release do, and they re-check capacity first.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Final, NamedTuple

from contracts.ids import NodeId
from coordinator.placement.candidates import FleetSnapshot, MacCandidate, PodCandidate
from coordinator.placement.config import PlacementConfig
from coordinator.placement.decision import Placement
from coordinator.placement.filters import FILTER_ORDER, FilterReason, state_reason
from coordinator.placement.memory import mac_ceiling_bytes
from coordinator.placement.natives import bisect_left, bisect_right, insort
from coordinator.placement.pods import PodTopology, pod_topology
from coordinator.placement.scoring import STATIC_SCORE_BITS, STATIC_SCORE_SCALE, static_score_quantum
from coordinator.placement.speed import (
    SpeedProfile, effective_bandwidth_step, loaded_bandwidth_step, step_bandwidth_bytes_per_s,
)

POSITION_BITS: Final = 20
POSITION_MASK: Final = (1 << POSITION_BITS) - 1
STATIC_SHIFT: Final = POSITION_BITS
FREE_SHIFT: Final = POSITION_BITS + STATIC_SCORE_BITS
# A key's static score and position. A key itself outgrows a machine word, so each operation on it
# makes a new int object; its tail fits one, so the scan takes it out once and works on that.
TAIL_MASK: Final = (1 << FREE_SHIFT) - 1
MAX_POSITIONS: Final = 1 << POSITION_BITS
# Job sizes per model whose fit starts are kept current; each costs a comparison per index change.
FIT_STARTS_PER_MODEL_MAX: Final = 8


def group_key(free_bytes: int, static_quantum: int, position: int) -> int:
    assert 0 <= position < MAX_POSITIONS and 0 <= static_quantum <= STATIC_SCORE_SCALE
    return (max(free_bytes, 0) << FREE_SHIFT) | ((STATIC_SCORE_SCALE - static_quantum) << STATIC_SHIFT) | position


class Group:
    """Available candidates of one model, profile and warmth, sorted by key."""

    __slots__ = ("keys", "static_max", "static_bound", "number")

    def __init__(self) -> None:
        # No packed copy of the free bytes beside the keys: decisions rarely bisect now (fit starts
        # are kept current), and every commit and release would move both.
        self.keys: list[int] = []
        self.number = 0  # where it is in its model's mac_groups (Mac groups only)
        self.static_max = 0  # never lowered: an upper bound is all pruning needs
        self.static_bound = 0.0  # static_max as a score, as static_score computes it

    def add(self, key: int, static_quantum: int) -> bool:
        """Insert a key; True when it raised the group's static bound."""
        insort(self.keys, key)
        if static_quantum > self.static_max:
            self.raise_static_bound(static_quantum)
            return True
        return False

    def raise_static_bound(self, static_quantum: int) -> None:
        self.static_max = static_quantum
        self.static_bound = static_quantum / STATIC_SCORE_SCALE

    def remove(self, key: int) -> None:
        i = bisect_left(self.keys, key)
        assert i < len(self.keys) and self.keys[i] == key, "index out of step with its slots"
        del self.keys[i]


class MacClass:
    """Macs serving one model with one speed profile."""

    __slots__ = ("profile", "bandwidth_bytes_per_s", "cold", "warm", "ceilings", "members")

    def __init__(self, profile: SpeedProfile, bandwidth_bytes_per_s: float) -> None:
        self.profile = profile
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        # Available Macs, apart by warmth: the warm bonus is the largest static difference,
        # and a few warm Macs must not hide behind many cold ones with a tighter fit.
        self.cold = Group()
        self.warm = Group()
        self.ceilings: list[int] = []  # every serving Mac in any state: could it ever fit?
        # Macs whose keys are filed here, in any state: a busy Mac's load moves it between classes,
        # and a class no Mac is in or has its ceiling in is dropped, so the index stays as if built anew.
        self.members = 0


class PodClass:
    """Pods serving one model with one topology and slowest-member step."""

    __slots__ = ("topology", "slowest_step", "bandwidth_bytes_per_s", "group", "by_ceiling")

    def __init__(self, topology: PodTopology, slowest_step: int, bandwidth_bytes_per_s: float) -> None:
        self.topology = topology
        self.slowest_step = slowest_step
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s  # of the slowest member
        self.group = Group()
        self.by_ceiling: list[tuple[int, int]] = []  # (-summed ceilings, position), any state


class ModelEntry:
    __slots__ = ("served", "unavailable", "classes", "fastest_first", "by_topology", "mac_groups", "mac_keys",
                 "group_speeds", "fit_starts", "fit_needs", "fit_starts_by_need", "topology_plans")

    def __init__(self) -> None:
        self.served = 0
        self.unavailable: dict[FilterReason, int] = {}
        self.classes: dict = {}  # MacClass by step, or PodClass by (topology, step)
        self.fastest_first: list = []  # the classes, by step descending
        self.by_topology: list[tuple[PodTopology, list[PodClass]]] = []  # pods: each topology's, fastest first
        # Macs: every group with its class's bandwidth and warmth, fastest first; one flat
        # list so a decision's pass over the groups does no attribute lookups.
        self.mac_groups: list[tuple[float, Group, bool]] = []
        self.mac_keys: list[list[int]] = []  # each group's keys, in mac_groups order
        # The search's per-job-shape facts about mac_groups (speeds, bound order); they hold
        # while the groups and their static bounds do, so any change to those empties it.
        self.group_speeds: dict = {}
        # For the job sizes (memory needs, bytes) asked about most recently: in each group, where
        # the first Mac that fits is, as bisect_left(free, need). Kept current as Macs come and go
        # (the common needs recur, so a decision rarely bisects all groups), oldest use first.
        self.fit_starts: dict[int, list[int]] = {}
        # fit_starts' needs, ascending: a Mac's change of free memory touches only the needs it crosses.
        self.fit_needs: list[int] = []
        self.fit_starts_by_need: list[list[int]] = []  # fit_starts' lists in fit_needs' order: no lookups
        # Pods: how jobs of one model, memory and bytes per token would run on each topology and its
        # classes, in by_topology order.
        self.topology_plans: dict = {}

    def add_class(self, key, new_class) -> None:
        self.classes[key] = new_class
        self._classes_changed(new_class)

    def drop_class(self, key) -> None:
        self._classes_changed(self.classes.pop(key))

    def _classes_changed(self, changed) -> None:
        self.group_speeds.clear()
        self.fit_starts.clear()
        self.fit_needs.clear()
        self.fit_starts_by_need.clear()
        self.topology_plans.clear()
        self.fastest_first = sorted(self.classes.values(), key=_class_step, reverse=True)
        if isinstance(changed, MacClass):
            self.mac_groups = [(mac_class.bandwidth_bytes_per_s, group, warm) for mac_class in self.fastest_first
                               for group, warm in ((mac_class.cold, False), (mac_class.warm, True))]
            self.mac_keys = [group.keys for _, group, _ in self.mac_groups]
            for number, (_, group, _) in enumerate(self.mac_groups):
                group.number = number
        else:
            topologies: dict[PodTopology, list[PodClass]] = {}
            for pod_class in self.fastest_first:
                topologies.setdefault(pod_class.topology, []).append(pod_class)
            self.by_topology = list(topologies.items())

    def fit_starts_for(self, need_bytes: int) -> list[int]:
        """Each Mac group's first position whose free memory is at least need_bytes (do not change it).

        A key is at least need_bytes << FREE_SHIFT exactly when its free memory is at least need_bytes.
        """
        starts = self.fit_starts.pop(need_bytes, None)
        if starts is None:
            if len(self.fit_starts) >= FIT_STARTS_PER_MODEL_MAX:
                oldest = next(iter(self.fit_starts))
                del self.fit_starts[oldest]
                k = bisect_left(self.fit_needs, oldest)
                del self.fit_needs[k], self.fit_starts_by_need[k]
            starts = list(map(bisect_left, self.mac_keys, itertools.repeat(need_bytes << FREE_SHIFT)))
            k = bisect_left(self.fit_needs, need_bytes)
            self.fit_needs.insert(k, need_bytes)
            self.fit_starts_by_need.insert(k, starts)
        self.fit_starts[need_bytes] = starts  # the most recently used last
        return starts


def _class_step(item: MacClass | PodClass) -> int:
    return item.profile.bandwidth_step if isinstance(item, MacClass) else item.slowest_step


class Membership(NamedTuple):
    """Where an available Mac's key goes for one model it serves: key = free << FREE_SHIFT | tail."""

    entry: ModelEntry
    group: Group
    tail: int  # the static score and position part of the key
    static_quantum: int
    model_id: str


class MacSlot:
    __slots__ = ("position", "candidate", "ceiling", "committed", "running", "reason", "step",
                 "static_cold", "static_warm", "pods", "memberships", "shared", "loaded_step")
    position: int
    candidate: MacCandidate
    ceiling: int
    committed: int
    running: int
    reason: FilterReason | None
    step: int  # its bandwidth step idle: its ceilings and pods are filed by it
    loaded_step: int  # what a new job would get with its running jobs: its keys are filed by it
    static_cold: int
    static_warm: int
    pods: list[PodSlot]  # the pods it is a member of
    memberships: list[Membership]
    # model id -> (bytes, jobs): memory committed once for a model's running jobs, which a new job
    # of it shares (its weights and runtime). A model's keys are filed under free + those bytes.
    shared: dict[str, tuple[int, int]]

    def static_quantum(self, model_id: str) -> int:
        return self.static_warm if model_id in self.candidate.warm_models else self.static_cold

    @property
    def free(self) -> int:
        return self.ceiling - self.committed

    def held(self, model_id: str) -> int:
        shared = self.shared.get(model_id)
        return shared[0] if shared is not None else 0


class PodSlot:
    __slots__ = ("position", "candidate", "members", "topology", "slowest_step", "static_cold",
                 "static_warm", "served", "warm", "ceiling_sum", "reason", "smallest_free", "memberships",
                 "filed_free")
    position: int
    candidate: PodCandidate
    members: tuple[MacSlot, ...]
    topology: PodTopology
    slowest_step: int
    static_cold: int
    static_warm: int
    served: frozenset[str]
    warm: frozenset[str]
    ceiling_sum: int
    reason: FilterReason | None
    smallest_free: int
    memberships: list[Membership]
    filed_free: int

    def static_quantum(self, model_id: str) -> int:
        return self.static_warm if model_id in self.warm else self.static_cold


@dataclass(frozen=True)
class IndexStats:
    macs: int
    pods: int
    models: int
    mac_groups: int
    pod_classes: int


class FleetIndex:
    def __init__(self, config: PlacementConfig) -> None:
        self.config = config
        self.mac_slots: list[MacSlot | None] = []
        self.pod_slots: list[PodSlot | None] = []
        self.mac_models: dict[str, ModelEntry] = {}
        self.pod_models: dict[str, ModelEntry] = {}
        self._mac_by_node: dict[NodeId, MacSlot] = {}
        self._pod_by_id: dict[str, PodSlot] = {}
        self._topologies: dict[PodTopology, PodTopology] = {}
        self.mac_count = 0
        self.pod_count = 0

    @classmethod
    def build(cls, snapshot: FleetSnapshot, config: PlacementConfig = PlacementConfig()) -> FleetIndex:
        index = cls(config)
        for mac in snapshot.macs:
            index.add_mac(mac)
        for pod in snapshot.pods:
            index.add_pod(pod)
        return index

    # -- reading ---------------------------------------------------------------------------

    def mac(self, node_id: NodeId) -> MacCandidate:
        """The Mac as the index sees it now, commitments included."""
        return self._current(self._mac_by_node[node_id])

    def has_mac(self, node_id: NodeId) -> bool:
        return node_id in self._mac_by_node

    def pod_ids_of(self, node_id: NodeId) -> tuple[str, ...]:
        """The pods this Mac is a member of."""
        return tuple(pod.candidate.pod_id for pod in self._mac_by_node[node_id].pods)

    def pods(self) -> dict[str, PodCandidate]:
        return {pod_id: slot.candidate for pod_id, slot in self._pod_by_id.items()}

    def free_bytes(self, node_id: NodeId) -> int:
        return self._mac_by_node[node_id].free

    def running_jobs(self, node_id: NodeId) -> int:
        """Jobs running on the Mac now, its own commits included."""
        return self._mac_by_node[node_id].running

    def commitment(self, node_id: NodeId) -> tuple[int, int, tuple[tuple[str, int, int], ...]]:
        """(committed bytes, running jobs, shared memory by model) as job_rows.committed_by_node reads them."""
        slot = self._mac_by_node[node_id]
        return slot.committed, slot.running, shared_tuple(slot.shared)

    def snapshot(self) -> FleetSnapshot:
        macs = tuple(self._current(slot) for slot in self.mac_slots if slot is not None)
        pods = tuple(slot.candidate for slot in self.pod_slots if slot is not None)
        return FleetSnapshot(macs, pods)

    def stats(self) -> IndexStats:
        mac_groups = sum(len(e.classes) * 2 for e in self.mac_models.values())
        pod_classes = sum(len(e.classes) for e in self.pod_models.values())
        return IndexStats(self.mac_count, self.pod_count, len(self.mac_models), mac_groups, pod_classes)

    @staticmethod
    def _current(slot: MacSlot) -> MacCandidate:
        mac = slot.candidate
        shared = shared_tuple(slot.shared)
        if mac.committed_memory_bytes == slot.committed and mac.running_jobs == slot.running \
                and mac.shared_memory == shared:
            return mac
        return replace(mac, committed_memory_bytes=slot.committed, running_jobs=slot.running, shared_memory=shared)

    # -- changing Macs ------------------------------------------------------------------

    def add_mac(self, mac: MacCandidate) -> None:
        assert mac.node_id not in self._mac_by_node, f"{mac.node_id} is already indexed"
        assert len(self.mac_slots) < MAX_POSITIONS, "index full"
        slot = MacSlot()
        slot.position = len(self.mac_slots)
        slot.pods = []
        self._fill_mac_slot(slot, mac)
        self.mac_slots.append(slot)
        self._mac_by_node[mac.node_id] = slot
        self.mac_count += 1
        self._register_mac(slot)

    def replace_mac(self, mac: MacCandidate) -> None:
        """A heartbeat or a settings change: the Mac's new state, by node id."""
        slot = self._mac_by_node.get(mac.node_id)
        if slot is None:
            self.add_mac(mac)
            return
        old = slot.candidate
        dynamic_only = replace(old, online=mac.online, owner_active=mac.owner_active,
                               committed_memory_bytes=mac.committed_memory_bytes,
                               running_jobs=mac.running_jobs, shared_memory=mac.shared_memory) == mac
        if dynamic_only:
            slot.candidate = mac
            self._set_loads([(slot, mac.committed_memory_bytes, mac.running_jobs, shared_dict(mac.shared_memory))])
            return
        pods = list(slot.pods)
        for pod in pods:
            self._unregister_pod(pod)
        self._unregister_mac(slot)
        self._fill_mac_slot(slot, mac)
        self._register_mac(slot)
        for pod in pods:
            self._fill_pod_statics(pod)
            self._register_pod(pod)

    def remove_mac(self, node_id: NodeId) -> None:
        slot = self._mac_by_node.pop(node_id)
        assert not slot.pods, "remove the Mac's pods first"
        self._unregister_mac(slot)
        self.mac_slots[slot.position] = None
        self.mac_count -= 1

    def try_commit(self, placement: Placement) -> bool:
        """Reserve a decision's memory, re-checking capacity; False when it is no longer there."""
        if placement.pod_id is None:  # one Mac, the common case: no lists to build
            slot = self._mac_by_node.get(placement.node_ids[0])
            if slot is None or slot.reason is not None:
                return False
            added, shared = commit_shared(slot.shared, placement.model_id, placement.reserved_memory_bytes[0],
                                          placement.shared_memory_bytes)
            if slot.ceiling - slot.committed < added:
                return False
            self._set_load(slot, slot.committed + added, slot.running + 1, shared)
            return True
        loads: list[tuple[MacSlot, int, int, dict[str, tuple[int, int]]]] = []
        for node_id, share in zip(placement.node_ids, placement.reserved_memory_bytes):
            member = self._mac_by_node.get(node_id)
            if member is None or member.reason is not None or member.free < share:
                return False
            loads.append((member, member.committed + share, member.running + 1, member.shared))
        self._set_loads(loads)
        return True

    def release(self, placement: Placement) -> None:
        """A committed job finished: give its memory back."""
        self.release_shares(placement.node_ids, placement.reserved_memory_bytes, placement.model_id,
                            placement.shared_memory_bytes)

    def release_shares(self, node_ids: tuple[NodeId, ...], reserved_memory_bytes: tuple[int, ...],
                       model_id: str = "", shared_memory_bytes: int = 0) -> None:
        """The same, for a caller that kept only where the job ran and what it reserved."""
        if len(node_ids) == 1:  # one Mac, the common case: no lists to build
            slot, share = self._mac_by_node[node_ids[0]], reserved_memory_bytes[0]
            freed, shared = release_shared(slot.shared, model_id, share, shared_memory_bytes)
            assert slot.committed >= freed and slot.running >= 1, "released more than was committed"
            self._set_load(slot, slot.committed - freed, slot.running - 1, shared)
            return
        slots = [self._mac_by_node[node_id] for node_id in node_ids]
        for slot, share in zip(slots, reserved_memory_bytes):
            assert slot.committed >= share and slot.running >= 1, "released more than was committed"
        self._set_loads([(slot, slot.committed - share, slot.running - 1, slot.shared)
                         for slot, share in zip(slots, reserved_memory_bytes)])

    def exclude(self, node_ids: frozenset[str]) -> list[MacSlot]:
        """Filter these Macs, and every pod they are in, out of the index under EXCLUDED until readmit.

        For one decision: a re-run goes to none of the nodes that failed its check. The cost is a
        re-filing per excluded Mac and pod, not a new index. Their ceilings leave too, so a job that
        only they could ever take is refused, not kept waiting for them. Returns what to readmit.
        """
        slots = [self._mac_by_node[NodeId(node_id)] for node_id in sorted(node_ids) if node_id in self._mac_by_node]
        pods = self._pods_of(slots)
        for pod in pods:
            self._detach_pod_state(pod)
            self._change_pod_ceilings(pod, -1)
        for slot in slots:
            self._detach_mac_state(slot)
            self._change_mac_ceilings(slot, -1)
            slot.reason = FilterReason.EXCLUDED
            self._attach_mac_state(slot)
        for pod in pods:
            pod.reason = self._pod_reason(pod)  # EXCLUDED: it comes first in the filter order
            self._attach_pod_state(pod)
        return slots

    def readmit(self, slots: list[MacSlot]) -> None:
        """Undo exclude: the Macs and their pods are filed by their own state again."""
        pods = self._pods_of(slots)
        for pod in pods:
            self._detach_pod_state(pod)
        for slot in slots:
            assert slot.reason is FilterReason.EXCLUDED, "readmitted a Mac that was not excluded"
            self._detach_mac_state(slot)
            mac = slot.candidate
            slot.reason = state_reason(mac.online, mac.owner_active, slot.running, mac.max_concurrent_jobs)
            self._attach_mac_state(slot)
            self._change_mac_ceilings(slot, +1)
        for pod in pods:
            pod.reason = self._pod_reason(pod)
            self._attach_pod_state(pod)
            self._change_pod_ceilings(pod, +1)

    @staticmethod
    def _pods_of(slots: list[MacSlot]) -> list[PodSlot]:
        return list(dict.fromkeys([pod for slot in slots for pod in slot.pods]))

    def _change_mac_ceilings(self, slot: MacSlot, sign: int) -> None:
        for model_id in slot.candidate.served_models:
            ceilings = self.mac_models[model_id].classes[slot.step].ceilings
            if sign > 0:
                insort(ceilings, slot.ceiling)
            else:
                del ceilings[bisect_left(ceilings, slot.ceiling)]

    def _change_pod_ceilings(self, slot: PodSlot, sign: int) -> None:
        for model_id in slot.served:
            by_ceiling = self.pod_models[model_id].classes[(slot.topology, slot.slowest_step)].by_ceiling
            if sign > 0:
                insort(by_ceiling, (-slot.ceiling_sum, slot.position))
            else:
                by_ceiling.remove((-slot.ceiling_sum, slot.position))

    def _set_loads(self, loads: list[tuple[MacSlot, int, int, dict[str, tuple[int, int]]]]) -> None:
        """New commitments for some Macs; a pod they share is re-filed once, not once per member."""
        pods = list(dict.fromkeys([pod for slot, _, _, _ in loads for pod in slot.pods]))
        for slot, committed, running, shared in loads:
            self._refile_mac(slot, committed, running, shared)
        for pod in pods:
            self._refile_pod(pod)

    def _set_load(self, slot: MacSlot, committed: int, running: int, shared: dict[str, tuple[int, int]]) -> None:
        """_set_loads for one Mac."""
        if slot.pods:
            self._set_loads([(slot, committed, running, shared)])
        else:
            self._refile_mac(slot, committed, running, shared)

    def _refile_mac(self, slot: MacSlot, committed: int, running: int, shared: dict[str, tuple[int, int]]) -> None:
        mac = slot.candidate
        reason = state_reason(mac.online, mac.owner_active, running, mac.max_concurrent_jobs)
        if running != slot.running:
            loaded_step = loaded_bandwidth_step(mac, running, self.config.speed)
            if loaded_step != slot.loaded_step:  # a new job would decode at another speed: other groups
                self._detach_mac_state(slot)
                self._leave_groups(slot)
                slot.committed, slot.running, slot.reason, slot.shared = committed, running, reason, shared
                slot.loaded_step = loaded_step
                self._join_groups(slot)
                self._attach_mac_state(slot)
                return
        same_held = _same_held(slot.shared, shared)
        if reason is None and slot.reason is None and same_held:  # available before and after: move its keys
            old_free, new_free = slot.ceiling - slot.committed, slot.ceiling - committed
            slot.committed, slot.running, slot.shared = committed, running, shared
            self._move_mac_state(slot, old_free, new_free)
            return
        if reason is not None and slot.reason is None:  # a commit filled it (the common change): one pass
            self._detach_mac_state(slot, reason)
            slot.committed, slot.running, slot.reason, slot.shared = committed, running, reason, shared
            return
        self._detach_mac_state(slot)
        slot.committed, slot.running, slot.reason, slot.shared = committed, running, reason, shared
        self._attach_mac_state(slot)

    def _fill_mac_slot(self, slot: MacSlot, mac: MacCandidate) -> None:
        config = self.config
        slot.candidate = mac
        slot.ceiling = mac_ceiling_bytes(mac, config.memory)
        slot.committed, slot.running = mac.committed_memory_bytes, mac.running_jobs
        slot.shared = shared_dict(mac.shared_memory)
        slot.reason = state_reason(mac.online, mac.owner_active, mac.running_jobs, mac.max_concurrent_jobs)
        slot.step = effective_bandwidth_step(mac, config.speed)
        slot.loaded_step = loaded_bandwidth_step(mac, mac.running_jobs, config.speed)
        slot.static_cold = static_score_quantum(mac.reputation, mac.price_per_million_tokens, False, config)
        slot.static_warm = static_score_quantum(mac.reputation, mac.price_per_million_tokens, True, config)

    def _register_mac(self, slot: MacSlot) -> None:
        for model_id in slot.candidate.served_models:
            entry = self.mac_models.get(model_id)
            if entry is None:
                entry = self.mac_models[model_id] = ModelEntry()
            entry.served += 1
            # Its ceiling is filed at its idle speed: whether it could ever take a job does not wait on its load.
            insort(self._mac_class(entry, slot.step).ceilings, slot.ceiling)
        self._join_groups(slot)
        self._attach_mac_state(slot)

    def _mac_class(self, entry: ModelEntry, step: int) -> MacClass:
        mac_class = entry.classes.get(step)
        if mac_class is None:
            bandwidth = step_bandwidth_bytes_per_s(step, self.config.speed) * 1.0
            mac_class = MacClass(SpeedProfile(step), bandwidth)
            entry.add_class(step, mac_class)
        return mac_class

    def _join_groups(self, slot: MacSlot) -> None:
        """The groups its keys go in: its models' classes at the speed a new job would get there now."""
        mac = slot.candidate
        slot.memberships = []
        for model_id in mac.served_models:
            entry = self.mac_models[model_id]
            mac_class = self._mac_class(entry, slot.loaded_step)
            mac_class.members += 1
            if model_id in mac.warm_models:
                group, static = mac_class.warm, slot.static_warm
            else:
                group, static = mac_class.cold, slot.static_cold
            # Groups are never dropped, so this holds until the Mac's models, warmth or load change.
            slot.memberships.append(Membership(entry, group, group_key(0, static, slot.position), static, model_id))

    def _unregister_mac(self, slot: MacSlot) -> None:
        self._detach_mac_state(slot)
        self._leave_groups(slot)
        for model_id in slot.candidate.served_models:
            entry = self.mac_models[model_id]
            entry.served -= 1
            ceilings = entry.classes[slot.step].ceilings
            del ceilings[bisect_left(ceilings, slot.ceiling)]
            self._drop_if_unused(entry, slot.step)

    def _leave_groups(self, slot: MacSlot) -> None:
        """Undo _join_groups (the Mac's keys are already detached)."""
        for membership in slot.memberships:
            entry = membership.entry
            mac_class: MacClass = entry.classes[slot.loaded_step]
            mac_class.members -= 1
            self._drop_if_unused(entry, slot.loaded_step)

    @staticmethod
    def _drop_if_unused(entry: ModelEntry, step: int) -> None:
        mac_class: MacClass | None = entry.classes.get(step)
        if mac_class is not None and mac_class.members == 0 and not mac_class.ceilings:
            assert not mac_class.cold.keys and not mac_class.warm.keys
            entry.drop_class(step)

    def _attach_mac_state(self, slot: MacSlot) -> None:
        reason = slot.reason
        if reason is not None:
            for membership in slot.memberships:
                unavailable = membership.entry.unavailable
                unavailable[reason] = unavailable.get(reason, 0) + 1
            return
        raw_free = slot.ceiling - slot.committed
        shared = slot.shared
        for entry, group, tail, static, model_id in slot.memberships:  # Group.add, inline: a commit runs this per model
            free = raw_free + slot.held(model_id) if shared else raw_free  # what a job of this model finds free
            free = free if free > 0 else 0  # as max(free, 0), which costs a call
            keys, key = group.keys, (free << FREE_SHIFT) | tail
            i = bisect_right(keys, key)
            keys[i:i] = (key,)  # insort, but the tail moves by one memmove, not list.insert's loop
            if static > group.static_max:
                group.raise_static_bound(static)
                entry.group_speeds.clear()
            needs = entry.fit_needs
            if needs and free < needs[-1]:  # it now sits before every start it is short of
                number = group.number
                for starts in entry.fit_starts_by_need[bisect_right(needs, free):]:
                    starts[number] += 1

    def _detach_mac_state(self, slot: MacSlot, counted_as: FilterReason | None = None) -> None:
        """Take an available Mac's keys out of its groups, or an unavailable one out of its counts.

        counted_as: the available Mac is now unavailable for this reason; it is counted so in the same pass.
        """
        reason = slot.reason
        if reason is not None:
            for membership in slot.memberships:
                membership.entry.unavailable[reason] -= 1
            return
        raw_free = slot.ceiling - slot.committed
        shared = slot.shared
        for entry, group, tail, _, model_id in slot.memberships:
            free = raw_free + slot.held(model_id) if shared else raw_free
            free = free if free > 0 else 0
            keys, key = group.keys, (free << FREE_SHIFT) | tail
            i = bisect_left(keys, key)
            assert i < len(keys) and keys[i] == key, "index out of step with its slots"
            del keys[i]
            needs = entry.fit_needs
            if needs and free < needs[-1]:  # no longer before the starts it was short of
                number = group.number
                for starts in entry.fit_starts_by_need[bisect_right(needs, free):]:
                    starts[number] -= 1
            if counted_as is not None:
                unavailable = entry.unavailable
                unavailable[counted_as] = unavailable.get(counted_as, 0) + 1

    def _move_mac_state(self, slot: MacSlot, old_raw_free: int, new_raw_free: int) -> None:
        """An available Mac's free memory changed, its shared memory did not, and it stays available:
        re-file its keys in one pass."""
        shared = slot.shared
        for entry, group, tail, _, model_id in slot.memberships:
            held = slot.held(model_id) if shared else 0
            old_free, new_free = old_raw_free + held, new_raw_free + held
            # Over its ceiling (a lowered cap) a Mac is filed with 0 free; conditionals, as max() costs a call.
            old_free = old_free if old_free > 0 else 0
            new_free = new_free if new_free > 0 else 0
            # A fit start counts the Macs short of its need: only needs between the two values change.
            low, high, change = (new_free, old_free, 1) if new_free < old_free else (old_free, new_free, -1)
            move_key(group.keys, (old_free << FREE_SHIFT) | tail, (new_free << FREE_SHIFT) | tail)
            needs = entry.fit_needs
            if needs:
                first = bisect_right(needs, low)
                if first < len(needs) and needs[first] <= high:
                    number = group.number
                    for starts in entry.fit_starts_by_need[first:bisect_right(needs, high, first)]:
                        starts[number] += change

    # -- changing pods ------------------------------------------------------------------

    def add_pod(self, pod: PodCandidate) -> None:
        assert pod.pod_id not in self._pod_by_id, f"{pod.pod_id} is already indexed"
        assert len(self.pod_slots) < MAX_POSITIONS, "index full"
        slot = PodSlot()
        slot.position = len(self.pod_slots)
        slot.candidate = pod
        assert all(node_id in self._mac_by_node for node_id in pod.members), f"{pod.pod_id}: add its Macs first"
        slot.members = tuple(self._mac_by_node[node_id] for node_id in pod.members)
        topology = pod_topology(pod, self.config.speed)
        slot.topology = self._topologies.setdefault(topology, topology)  # one shared object per topology
        self._fill_pod_statics(slot)
        self.pod_slots.append(slot)
        self._pod_by_id[pod.pod_id] = slot
        self.pod_count += 1
        for member in slot.members:
            member.pods.append(slot)
        self._register_pod(slot)

    def remove_pod(self, pod_id: str) -> None:
        slot = self._pod_by_id.pop(pod_id)
        self._unregister_pod(slot)
        for member in slot.members:
            member.pods.remove(slot)
        self.pod_slots[slot.position] = None
        self.pod_count -= 1

    def pod_free_bytes(self, slot: PodSlot) -> tuple[int, ...]:
        return tuple(member.free for member in slot.members)

    @staticmethod
    def pod_free_sum(slot: PodSlot) -> int:
        """A pod's memory is the sum of its members' free memory (a member over its ceiling adds 0)."""
        return sum([member.ceiling - member.committed if member.ceiling > member.committed else 0
                    for member in slot.members])

    def _fill_pod_statics(self, slot: PodSlot) -> None:
        members = [member.candidate for member in slot.members]
        slot.served = frozenset.intersection(*(mac.served_models for mac in members))
        slot.warm = frozenset.intersection(*(mac.warm_models for mac in members))
        slot.slowest_step = min(member.step for member in slot.members)
        slot.ceiling_sum = sum(member.ceiling for member in slot.members)
        # A pod is as trustworthy as its least reputable member and costs all its members' time.
        reputation = min(mac.reputation for mac in members)
        price = sum(mac.price_per_million_tokens for mac in members)
        slot.static_cold = static_score_quantum(reputation, price, False, self.config)
        slot.static_warm = static_score_quantum(reputation, price, True, self.config)
        slot.reason = self._pod_reason(slot)

    @staticmethod
    def _pod_reason(slot: PodSlot) -> FilterReason | None:
        reasons = [member.reason for member in slot.members if member.reason is not None]
        return min(reasons, key=FILTER_ORDER.index) if reasons else None

    def _register_pod(self, slot: PodSlot) -> None:
        class_key = (slot.topology, slot.slowest_step)
        slot.memberships = []
        for model_id in slot.served:
            entry = self.pod_models.get(model_id)
            if entry is None:
                entry = self.pod_models[model_id] = ModelEntry()
            entry.served += 1
            pod_class = entry.classes.get(class_key)
            if pod_class is None:
                bandwidth = step_bandwidth_bytes_per_s(slot.slowest_step, self.config.speed)
                pod_class = PodClass(slot.topology, slot.slowest_step, bandwidth)
                entry.add_class(class_key, pod_class)
            insort(pod_class.by_ceiling, (-slot.ceiling_sum, slot.position))
            static = slot.static_quantum(model_id)
            # Classes are never dropped, so this holds until the pod's members or their models change.
            slot.memberships.append(Membership(entry, pod_class.group, group_key(0, static, slot.position), static,
                                               model_id))
        self._attach_pod_state(slot)

    def _unregister_pod(self, slot: PodSlot) -> None:
        self._detach_pod_state(slot)
        class_key = (slot.topology, slot.slowest_step)
        for model_id in slot.served:
            entry = self.pod_models[model_id]
            entry.served -= 1
            by_ceiling = entry.classes[class_key].by_ceiling
            by_ceiling.remove((-slot.ceiling_sum, slot.position))

    def _attach_pod_state(self, slot: PodSlot) -> None:
        self._change_pod_state(slot, +1)

    def _detach_pod_state(self, slot: PodSlot) -> None:
        self._change_pod_state(slot, -1)

    def _change_pod_state(self, slot: PodSlot, sign: int) -> None:
        reason = slot.reason
        if reason is not None:
            for entry, _, _, _, _ in slot.memberships:
                entry.unavailable[reason] = entry.unavailable.get(reason, 0) + sign
            return
        if sign > 0:  # a pod is re-filed whenever a member's load changes, so these stay current
            slot.filed_free = self.pod_free_sum(slot)
            slot.smallest_free = min([member.free for member in slot.members])
        shifted = slot.filed_free << FREE_SHIFT  # its keys are filed under this sum until re-filed
        for _, group, tail, quantum, _ in slot.memberships:
            group.add(shifted | tail, quantum) if sign > 0 else group.remove(shifted | tail)

    def _refile_pod(self, slot: PodSlot) -> None:
        """A member's load changed: file the pod under its new state and summed free memory."""
        reason = self._pod_reason(slot)
        if reason is None and slot.reason is None:  # available before and after: move its keys
            old_shifted = slot.filed_free << FREE_SHIFT
            slot.filed_free = self.pod_free_sum(slot)
            slot.smallest_free = min([member.free for member in slot.members])
            new_shifted = slot.filed_free << FREE_SHIFT
            for _, group, tail, _, _ in slot.memberships:
                move_key(group.keys, old_shifted | tail, new_shifted | tail)
            return
        self._detach_pod_state(slot)
        slot.reason = reason
        self._attach_pod_state(slot)


def move_key(keys: list[int], old_key: int, new_key: int) -> None:
    """Re-file one key in a sorted list: its new place is on the side it moved to, and when it passes
    no other key it is replaced where it is."""
    i = bisect_left(keys, old_key)
    assert i < len(keys) and keys[i] == old_key, "index out of step with its slots"
    if new_key < old_key:
        j = bisect_right(keys, new_key, 0, i)
        if j == i:
            keys[i] = new_key
        else:
            del keys[i]
            keys[j:j] = (new_key,)  # insort's insert, but the tail moves by memmove, not an element loop
    else:
        j = bisect_right(keys, new_key, i + 1)
        if j == i + 1:
            keys[i] = new_key
        else:
            keys[j:j] = (new_key,)
            del keys[i]


def shared_dict(shared_memory: tuple[tuple[str, int, int], ...]) -> dict[str, tuple[int, int]]:
    return {model_id: (held, jobs) for model_id, held, jobs in shared_memory}


def shared_tuple(shared: dict[str, tuple[int, int]]) -> tuple[tuple[str, int, int], ...]:
    """A MacCandidate's shared_memory: by model id."""
    return tuple([(model_id, held, jobs) for model_id, (held, jobs) in sorted(shared.items())])


def _same_held(old: dict[str, tuple[int, int]], new: dict[str, tuple[int, int]]) -> bool:
    """Whether every model's shared bytes are unchanged (its job count may differ): then no key changes
    but by the Mac's free memory."""
    if len(old) != len(new):
        return False
    for model_id, (held, _) in old.items():
        other = new.get(model_id)
        if other is None or other[0] != held:
            return False
    return True


def commit_shared(shared: dict[str, tuple[int, int]], model_id: str, reserved: int,
                  shared_bytes: int) -> tuple[int, dict[str, tuple[int, int]]]:
    """A single-Mac job of model_id commits: (bytes it adds, the Mac's shared memory after).

    The first running job of a model commits all it reserves; each later one all but the shared part,
    which the first already holds (a job never adds less than its own part)."""
    if shared_bytes <= 0:
        return reserved, shared
    held = shared.get(model_id)
    after = dict(shared)
    if held is None:
        after[model_id] = (shared_bytes, 1)
        return reserved, after
    held_bytes, jobs = held
    after[model_id] = (held_bytes, jobs + 1)
    return reserved - (shared_bytes if shared_bytes < held_bytes else held_bytes), after


def release_shared(shared: dict[str, tuple[int, int]], model_id: str, reserved: int,
                   shared_bytes: int) -> tuple[int, dict[str, tuple[int, int]]]:
    """commit_shared undone: (bytes freed, the Mac's shared memory after); the last job of a model
    frees the shared part too."""
    held = shared.get(model_id) if shared_bytes > 0 else None
    if held is None:
        return reserved, shared
    held_bytes, jobs = held
    after = dict(shared)
    if jobs == 1:
        del after[model_id]
        return reserved - (shared_bytes if shared_bytes < held_bytes else held_bytes) + held_bytes, after
    after[model_id] = (held_bytes, jobs - 1)
    return reserved - (shared_bytes if shared_bytes < held_bytes else held_bytes), after
