"""Searching the index's pods: the same bisect-and-bound as for Macs, plus each pod's exact split.

A pod is keyed by its members' summed free memory, which is necessary but not
sufficient: each member must hold its share. Pods whose split fails are counted
under does_not_fit when scored; pods the bound never reached are not split-checked.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Final, NamedTuple

from coordinator.placement.config import PlacementConfig
from coordinator.placement.filters import FilterReason
from coordinator.placement.index import (
    FREE_SHIFT, POSITION_MASK, STATIC_SHIFT, TAIL_MASK, FleetIndex, ModelEntry, PodClass, PodSlot,
)
from coordinator.placement.natives import bisect_left, log2
from coordinator.placement.pods import PodTopology, fit_pod
from coordinator.placement.scoring import STATIC_SCORE_SCALE
from coordinator.placement.search import Best, SearchResult, search_prologue, skip_free_value
from coordinator.placement.speed import decode_from_bandwidth
from coordinator.placement.terms import JobTerms, TopologyPlan, plan_topology
from coordinator.placement.vocabulary import Strategy


def search_pods(index: FleetIndex, terms: JobTerms) -> SearchResult:
    config = index.config
    entry, filtered, best = search_prologue(index.pod_models, index.pod_count, terms, config)
    if entry is None:
        return best.result(filtered, 0, 0, None)
    pending: list[PendingClass] = []
    feasible = 0
    fast_enough, unsplittable, too_slow = _classes_fast_enough(_shape_plans(entry, terms, config), terms)
    # The model cannot be split over the first's members, and the second's are too slow: counted in C.
    does_not_fit, below = sum(map(len, unsplittable)), sum(map(len, too_slow))
    for keys, need_key, plan, decode, pod_class in fast_enough:
        if keys and keys[-1] < need_key:  # common for big jobs: no pod of this class is big enough now
            does_not_fit += len(keys)
        elif keys:
            counts = _pod_class_candidates(pod_class, plan, decode, terms, config, pending)
            does_not_fit += counts[0]
            feasible += counts[1]
    pending.sort(key=itemgetter(0), reverse=True)
    scored, split_failures = _scan(index, pending, terms, best)
    filtered[FilterReason.BELOW_MIN_SPEED] = below
    filtered[FilterReason.DOES_NOT_FIT] = does_not_fit + split_failures
    chosen = None
    if best.ties:
        tied = sorted(best.ties, key=itemgetter(0))
        chosen = tied[terms.seed % len(tied)][1] if len(tied) > 1 else tied[0][1]
    return best.result(filtered, feasible - split_failures, scored, chosen)


# A class queued for the scan: (its bound, the class, where the job starts to fit, the plan, its decode
# speed, its speed score). Typed, so the compiled scan reads each as a double, an int or a class.
PendingClass = tuple[float, PodClass, int, TopologyPlan, float, float]
TOPOLOGY_PLANS_PER_MODEL_MAX: Final = 64  # job shapes remembered per model; past it the memory starts afresh


class ShapePlans(NamedTuple):
    """How jobs of one shape would run on a model's pods, remembered per shape."""

    # For each of the entry's topologies: plan_topology, and each class's decode speed (fastest first).
    by_topology: list[tuple[TopologyPlan | None, list[float]]]
    # The same, one row per class in that order: (its keys, the need as a key or None when the model
    # cannot be split over it, the plan, its decode speed, the class).
    classes: list[tuple[list[int], int | None, TopologyPlan | None, float, PodClass]]
    # The splittable classes' decode speeds, ascending: a job's minimum speed cuts them at one place.
    decodes: list[float]
    # By that cut, _classes_fast_enough's answer: most classes are too slow for a job that asks for
    # a speed, and skipping them row by row cost more than the rest of the pass.
    by_cut: dict[int, tuple[list, list[list[int]], list[list[int]]]]


def _shape_plans(entry: ModelEntry, terms: JobTerms, config: PlacementConfig) -> ShapePlans:
    """Both depend only on the model, the memory need and the bytes per token, which jobs share."""
    shape = (terms.job.model, terms.memory, terms.bytes_per_token)
    plans = entry.topology_plans.get(shape)
    if plans is None:
        if len(entry.topology_plans) >= TOPOLOGY_PLANS_PER_MODEL_MAX:
            entry.topology_plans.clear()
        by_topology = [_plan_with_decodes(topology, classes, terms, config) for topology, classes in entry.by_topology]
        rows: list[tuple[list[int], int | None, TopologyPlan | None, float, PodClass]] = []
        for (_, classes), (plan, decodes) in zip(entry.by_topology, by_topology):
            if plan is None:
                rows += [(pod_class.group.keys, None, None, 0.0, pod_class) for pod_class in classes]
            else:
                need_key = plan.need_bytes << FREE_SHIFT
                rows += [(pod_class.group.keys, need_key, plan, decode, pod_class)
                         for pod_class, decode in zip(classes, decodes)]
        decodes = sorted(row[3] for row in rows if row[1] is not None)
        plans = entry.topology_plans[shape] = ShapePlans(by_topology, rows, decodes, {})
    return plans


def _classes_fast_enough(plans: ShapePlans, terms: JobTerms) -> tuple[list, list[list[int]], list[list[int]]]:
    """(rows of the splittable classes fast enough for the job, in plans.classes order; the keys of the
    classes the model cannot be split over; the keys of those too slow), remembered per speed cut."""
    min_decode = terms.job.min_decode_tokens_per_s
    cut = bisect_left(plans.decodes, min_decode)
    found = plans.by_cut.get(cut)
    if found is None:
        rows = plans.classes
        found = plans.by_cut[cut] = (
            [row for row in rows if row[1] is not None and row[3] >= min_decode],
            [row[0] for row in rows if row[1] is None],
            [row[0] for row in rows if row[1] is not None and row[3] < min_decode])
    return found


def _plan_with_decodes(topology: PodTopology, classes: list[PodClass], terms: JobTerms,
                       config: PlacementConfig) -> tuple[TopologyPlan | None, list[float]]:
    plan = plan_topology(topology, terms, config)
    if plan is None:
        return None, []
    return plan, [decode_from_bandwidth(pod_class.bandwidth_bytes_per_s, plan.speedup, plan.hops,
                                        plan.hop_latency_s, terms.bytes_per_token) for pod_class in classes]


def _pod_class_candidates(pod_class: PodClass, plan: TopologyPlan, decode: float, terms: JobTerms,
                          config: PlacementConfig, pending: list[PendingClass]) -> tuple[int, int]:
    """(too small, big enough) counts for one class; queue it for scanning if any are big enough."""
    keys = pod_class.group.keys
    if not keys:
        return 0, 0
    start = bisect_left(keys, plan.need_bytes << FREE_SHIFT)
    if start == len(keys):
        return start, 0
    w_fit, w_speed, _, _, _ = config.weights.normalised
    speed = decode / terms.speed_target  # as speed_score
    if speed > 1.0:
        speed = 1.0
    fit = max(0.0, 1.0 - log2((keys[start] >> FREE_SHIFT) / plan.need_bytes) / config.best_fit_span_octaves)
    bound = w_fit * fit + w_speed * speed + pod_class.group.static_max / STATIC_SCORE_SCALE
    pending.append((bound, pod_class, start, plan, decode, speed))
    return start, len(keys) - start


def _scan(index: FleetIndex, pending: list[PendingClass], terms: JobTerms, best: Best) -> tuple[int, int]:
    """Scan the queued classes best bound first; the scores are the exhaustive search's expressions, inline."""
    config = index.config
    w_fit, w_speed, _, _, _ = config.weights.normalised
    span = config.best_fit_span_octaves
    model_id = terms.job.model.model_id
    pod_slots = index.pod_slots
    scored_max, scan_max = config.scored_per_decision_max, config.scan_per_group_max
    scored = split_failures = 0
    floor = best.floor  # changes only when a pod is offered
    for bound, pod_class, start, plan, decode, speed in pending:
        if bound < floor or scored >= scored_max:
            break
        keys = pod_class.group.keys
        static_bound = pod_class.group.static_max / STATIC_SCORE_SCALE
        weighted_speed = w_speed * speed  # as speed_part
        need, member_min, tensor = plan.need_bytes, plan.member_min_bytes, plan.strategy is Strategy.TENSOR
        i, end = start, min(len(keys), start + scan_max)
        while i < end:
            key = keys[i]
            free = key >> FREE_SHIFT
            fit = 1.0 - log2(free / need) / span
            if fit < 0.0:
                fit = 0.0
            upper = w_fit * fit + weighted_speed
            if upper + static_bound < floor:
                break
            tail = key & TAIL_MASK  # index.py says why
            score = upper + (STATIC_SCORE_SCALE - (tail >> STATIC_SHIFT)) / STATIC_SCORE_SCALE
            if score < floor:  # as total_score with the key's static_score; skip the rest with this free memory
                i = skip_free_value(keys, i, free)
                continue
            i += 1
            slot = pod_slots[tail & POSITION_MASK]
            assert slot is not None, "index out of step with its slots"
            # fit_pod's answer: a member short of its least share fails; tensor shares are that share.
            if slot.smallest_free < member_min or not (tensor or _pipeline_fits(index, slot, terms)):
                split_failures += 1
                continue
            scored += 1
            best.offer(slot.position, (score, slot.position, free, fit, speed, model_id in slot.warm, decode,
                                       plan.strategy))
            floor = best.floor
    return scored, split_failures


def _pipeline_fits(index: FleetIndex, slot: PodSlot, terms: JobTerms) -> bool:
    free = index.pod_free_bytes(slot)
    return fit_pod(terms.memory, Strategy.PIPELINE, terms.job.model.num_layers, free) is not None


def pod_could_ever_take(index: FleetIndex, terms: JobTerms) -> bool:
    """Some pod serving the model, all members idle and online, would take the job at the needed speed."""
    config = index.config
    entry = index.pod_models.get(terms.job.model.model_id)
    if entry is None:
        return False
    limit = config.pods_checked_for_permanence_max
    for (_, classes), (plan, decodes) in zip(entry.by_topology, _shape_plans(entry, terms, config).by_topology):
        if plan is None:
            continue
        for pod_class, decode in zip(classes, decodes):
            if decode < terms.job.min_decode_tokens_per_s:
                break
            if _largest_could_take(index, pod_class, plan, terms, limit):
                return True
    return False


def _largest_could_take(index: FleetIndex, pod_class: PodClass, plan: TopologyPlan, terms: JobTerms,
                        limit: int) -> bool:
    """Check the class's largest pods, up to a limit; past it, answer True: the job waits, not refused."""
    for checked, (negative_ceiling, position) in enumerate(pod_class.by_ceiling):
        if -negative_ceiling < plan.need_bytes:
            return False
        if checked == limit:
            return True
        slot = index.pod_slots[position]
        assert slot is not None, "index out of step with its slots"
        ceilings = tuple(member.ceiling for member in slot.members)
        if fit_pod(terms.memory, plan.strategy, terms.job.model.num_layers, ceilings) is not None:
            return True
    return False
