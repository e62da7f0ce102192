"""Searching the index's pods: the same bisect-and-bound as for Macs, plus each pod's exact split.

A pod is keyed by its members' summed free memory, which is necessary but not
sufficient: each member must hold its share. Pods whose split fails are counted
under does_not_fit when scored; pods the bound never reached are not split-checked.
"""

from __future__ import annotations

from bisect import bisect_left
from math import log2
from operator import itemgetter

from coordinator.placement.filters import FilterReason
from coordinator.placement.index import FREE_SHIFT, POSITION_MASK, FleetIndex
from coordinator.placement.pods import fit_pod
from coordinator.placement.scoring import STATIC_SCORE_SCALE, base_score, static_score, total_score
from coordinator.placement.search import Best, Scored, SearchResult
from coordinator.placement.terms import JobTerms, plan_pod


def search_pods(index: FleetIndex, terms: JobTerms) -> SearchResult:
    config = index.config
    entry = index.pod_models.get(terms.job.model.model_id)
    filtered = {FilterReason.MODEL_NOT_SERVED: index.pod_count - (entry.served if entry else 0)}
    best = Best(config.top_candidates_explained)
    if entry is None:
        return best.result(filtered, 0, 0, None)
    filtered.update(entry.unavailable)
    w_fit, w_speed, w_warm, _, _ = config.weights.normalised()
    pending = []
    below = does_not_fit = feasible = 0
    for pod_class in entry.classes.values():
        keys = pod_class.group.keys
        if not keys:
            continue
        plan = plan_pod(pod_class.topology, pod_class.slowest_step, terms, config)
        if plan is None:
            does_not_fit += len(keys)
            continue
        if plan.decode_tokens_per_s < terms.job.min_decode_tokens_per_s:
            below += len(keys)
            continue
        start = bisect_left(keys, plan.need_bytes << FREE_SHIFT)
        does_not_fit += start
        if start == len(keys):
            continue
        feasible += len(keys) - start
        fit = max(0.0, 1.0 - log2((keys[start] >> FREE_SHIFT) / plan.need_bytes) / config.best_fit_span_octaves)
        bound = w_fit * fit + base_score(w_speed, w_warm, plan.speed, 1.0) + pod_class.group.static_max / STATIC_SCORE_SCALE
        pending.append((bound, pod_class, start, plan))
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
    w_fit, w_speed, w_warm, _, _ = config.weights.normalised()
    span = config.best_fit_span_octaves
    model = terms.job.model
    scored = split_failures = 0
    for bound, pod_class, start, plan in pending:
        if bound < best.floor or scored >= config.scored_per_decision_max:
            break
        keys = pod_class.group.keys
        static_bound = pod_class.group.static_max / STATIC_SCORE_SCALE
        warm_base = base_score(w_speed, w_warm, plan.speed, 1.0)
        for key in keys[start: start + config.scan_per_group_max]:
            free = key >> FREE_SHIFT
            fit = max(0.0, 1.0 - log2(free / plan.need_bytes) / span)
            if w_fit * fit + warm_base + static_bound < best.floor:
                break
            slot = index.pod_slots[key & POSITION_MASK]
            if fit_pod(terms.memory, plan.strategy, model.num_layers, index.pod_free_bytes(slot)) is None:
                split_failures += 1
                continue
            warm = model.model_id in slot.warm
            base = base_score(w_speed, w_warm, plan.speed, 1.0 if warm else 0.0)
            score = total_score(w_fit, fit, base, static_score(slot.static_quantum))
            scored += 1
            if score >= best.floor:
                best.offer(slot.position, Scored(score, slot.position, free, fit, plan.speed, warm,
                                                 plan.decode_tokens_per_s, plan.strategy))
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
    for pod_class in entry.classes.values():
        plan = plan_pod(pod_class.topology, pod_class.slowest_step, terms, config)
        if plan is None or plan.decode_tokens_per_s < terms.job.min_decode_tokens_per_s:
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
