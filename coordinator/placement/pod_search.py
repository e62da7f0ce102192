"""Searching the index's pods: the same bisect-and-bound as for Macs, plus each pod's exact split.

A pod is keyed by its members' summed free memory, which is necessary but not
sufficient: each member must hold its share. Pods whose split fails are counted
under does_not_fit when scored; pods the bound never reached are not split-checked.
"""

from __future__ import annotations

from bisect import bisect_left
from math import log2
from operator import itemgetter

from coordinator.placement.config import PlacementConfig
from coordinator.placement.filters import FilterReason
from coordinator.placement.index import FREE_SHIFT, POSITION_MASK, FleetIndex, PodClass
from coordinator.placement.pods import fit_pod
from coordinator.placement.scoring import STATIC_SCORE_SCALE, speed_part, speed_score, total_score
from coordinator.placement.search import Best, SearchResult, skip_free_value, static_of_key
from coordinator.placement.speed import decode_from_bandwidth
from coordinator.placement.terms import JobTerms, TopologyPlan, plan_topology


def _class_plans(classes: list[PodClass], terms: JobTerms, config: PlacementConfig):
    """(class, topology plan or None, decode) for each class; topologies are planned once."""
    plans: dict[int, TopologyPlan | None] = {}  # by id: the index shares one object per topology
    for pod_class in classes:
        topology = pod_class.topology
        plan = plans.get(id(topology), False)
        if plan is False:
            plan = plans[id(topology)] = plan_topology(topology, terms, config)
        if plan is None:
            yield pod_class, None, 0.0
            continue
        yield pod_class, plan, decode_from_bandwidth(pod_class.bandwidth_bytes_per_s, plan.speedup, plan.hops,
                                                     plan.hop_latency_s, terms.bytes_per_token)


def search_pods(index: FleetIndex, terms: JobTerms) -> SearchResult:
    config = index.config
    entry = index.pod_models.get(terms.job.model.model_id)
    filtered = {FilterReason.MODEL_NOT_SERVED: index.pod_count - (entry.served if entry else 0)}
    best = Best(config.top_candidates_explained)
    if entry is None:
        return best.result(filtered, 0, 0, None)
    filtered.update(entry.unavailable)
    w_fit, w_speed, _, _, _ = config.weights.normalised
    pending = []
    below = does_not_fit = feasible = 0
    plans: dict[int, TopologyPlan | None] = {}  # by id: the index shares one object per topology
    for pod_class in entry.fastest_first:
        keys = pod_class.group.keys
        if not keys:
            continue
        topology = pod_class.topology
        plan = plans.get(id(topology), False)
        if plan is False:
            plan = plans[id(topology)] = plan_topology(topology, terms, config)
        if plan is None:
            does_not_fit += len(keys)
            continue
        decode = decode_from_bandwidth(pod_class.bandwidth_bytes_per_s, plan.speedup, plan.hops,
                                       plan.hop_latency_s, terms.bytes_per_token)
        if decode < terms.job.min_decode_tokens_per_s:
            below += len(keys)
            continue
        start = bisect_left(keys, plan.need_bytes << FREE_SHIFT)
        does_not_fit += start
        if start == len(keys):
            continue
        feasible += len(keys) - start
        speed = speed_score(decode, terms.speed_target)
        fit = max(0.0, 1.0 - log2((keys[start] >> FREE_SHIFT) / plan.need_bytes) / config.best_fit_span_octaves)
        bound = w_fit * fit + speed_part(w_speed, speed) + pod_class.group.static_max / STATIC_SCORE_SCALE
        pending.append((bound, pod_class, start, plan, decode, speed))
    pending.sort(key=itemgetter(0), reverse=True)
    scored, split_failures = _scan(index, pending, terms, best)
    filtered[FilterReason.BELOW_MIN_SPEED] = below
    filtered[FilterReason.DOES_NOT_FIT] = does_not_fit + split_failures
    chosen = None
    if best.ties:
        tied = sorted(best.ties, key=lambda tie: tie[0])
        chosen = tied[terms.seed % len(tied)][1]
    return best.result(filtered, feasible - split_failures, scored, chosen)


def _scan(index: FleetIndex, pending: list, terms: JobTerms, best: Best) -> tuple[int, int]:
    config = index.config
    w_fit, w_speed, _, _, _ = config.weights.normalised
    span = config.best_fit_span_octaves
    model = terms.job.model
    scored = split_failures = 0
    for bound, pod_class, start, plan, decode, speed in pending:
        if bound < best.floor or scored >= config.scored_per_decision_max:
            break
        keys = pod_class.group.keys
        static_bound = pod_class.group.static_max / STATIC_SCORE_SCALE
        weighted_speed = speed_part(w_speed, speed)
        i, end = start, min(len(keys), start + config.scan_per_group_max)
        while i < end:
            key = keys[i]
            free = key >> FREE_SHIFT
            fit = max(0.0, 1.0 - log2(free / plan.need_bytes) / span)
            upper = w_fit * fit + weighted_speed
            if upper + static_bound < best.floor:
                break
            if upper + static_of_key(key) < best.floor:
                i = skip_free_value(keys, i, free)
                continue
            i += 1
            slot = index.pod_slots[key & POSITION_MASK]
            if fit_pod(terms.memory, plan.strategy, model.num_layers, index.pod_free_bytes(slot)) is None:
                split_failures += 1
                continue
            warm = model.model_id in slot.warm
            score = total_score(w_fit, fit, weighted_speed, static_of_key(key))
            scored += 1
            if score >= best.floor:
                best.offer(slot.position, (score, slot.position, free, fit, speed, warm, decode, plan.strategy))
    return scored, split_failures


def pod_could_ever_take(index: FleetIndex, terms: JobTerms) -> bool:
    """Some pod serving the model, all members idle and online, would take the job at the needed speed.

    Checks the largest pods of each class, up to a limit; past the limit it answers True,
    the safe side (the job waits rather than being refused).
    """
    config = index.config
    entry = index.pod_models.get(terms.job.model.model_id)
    if entry is None:
        return False
    limit = config.pods_checked_for_permanence_max
    for pod_class, plan, decode in _class_plans(entry.fastest_first, terms, config):
        if plan is None or decode < terms.job.min_decode_tokens_per_s:
            continue
        for checked, (negative_ceiling, position) in enumerate(pod_class.by_ceiling):
            if -negative_ceiling < plan.need_bytes:
                break
            if checked == limit:
                return True
            slot = index.pod_slots[position]
            ceilings = tuple(member.ceiling for member in slot.members)
            if fit_pod(terms.memory, plan.strategy, terms.job.model.num_layers, ceilings) is not None:
                return True
    return False
