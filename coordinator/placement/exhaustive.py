"""The reference search: apply every filter to every candidate and score all that pass.

Slow (it touches the whole fleet per decision) and plain on purpose: the index must
make the same choice, or one scoring within a hair of it. Same filters in the same
order, same scores computed by the same expressions, same tie-break.
"""

from __future__ import annotations

from operator import itemgetter

from contracts.ids import NodeId
from coordinator.placement.candidates import FleetSnapshot, JobRequest, MacCandidate, PodCandidate
from coordinator.placement.config import PlacementConfig
from coordinator.placement.decision import Placement, Unplaceable
from coordinator.placement.filters import FilterReason, mac_state_reason
from coordinator.placement.memory import held_for_model, mac_ceiling_bytes
from coordinator.placement.planner import decide
from coordinator.placement.pods import fit_pod, pod_topology
from coordinator.placement.scoring import (
    best_fit_score, speed_part, speed_score, static_score, static_score_quantum, total_score,
)
from coordinator.placement.search import Best, SearchResult
from coordinator.placement.speed import (
    SpeedProfile, decode_tokens_per_s, effective_bandwidth_step, loaded_bandwidth_step,
)
from coordinator.placement.terms import JobTerms, plan_pod
from coordinator.placement.vocabulary import Strategy


class ExhaustiveView:
    """Per-Mac facts are computed once per snapshot; every decision still visits every candidate."""

    def __init__(self, snapshot: FleetSnapshot, config: PlacementConfig) -> None:
        self.snapshot = snapshot
        self.config = config
        self.mac_count = len(snapshot.macs)
        self.pod_count = len(snapshot.pods)
        self._rows = [(mac, mac_ceiling_bytes(mac, config.memory), effective_bandwidth_step(mac, config.speed),
                       mac_state_reason(mac)) for mac in snapshot.macs]
        # The speed a new job gets on each Mac with the jobs already in its batch.
        self._loaded_steps = [loaded_bandwidth_step(mac, mac.running_jobs, config.speed) for mac in snapshot.macs]
        self._by_node = {row[0].node_id: row for row in self._rows}

    def mac_at(self, position: int) -> MacCandidate:
        return self.snapshot.macs[position]

    def pod_at(self, position: int) -> tuple[PodCandidate, tuple[MacCandidate, ...]]:
        pod = self.snapshot.pods[position]
        return pod, tuple(self._by_node[node_id][0] for node_id in pod.members)

    def running_at(self, node_ids: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(self._by_node[NodeId(node_id)][0].running_jobs for node_id in node_ids)

    def pod_free_bytes(self, position: int) -> tuple[int, ...]:
        rows = [self._by_node[node_id] for node_id in self.snapshot.pods[position].members]
        return tuple(ceiling - mac.committed_memory_bytes for mac, ceiling, _, _ in rows)

    def search_macs(self, terms: JobTerms) -> SearchResult:
        config = self.config
        w_fit, w_speed, _, _, _ = config.weights.normalised
        model_id, need = terms.job.model.model_id, terms.memory.total_bytes
        filtered = {reason: 0 for reason in FilterReason}
        best = Best(config.top_candidates_explained)
        decode_by_step: dict[int, float] = {}
        feasible = 0
        for position, (mac, ceiling, step, reason) in enumerate(self._rows):
            if model_id not in mac.served_models:
                filtered[FilterReason.MODEL_NOT_SERVED] += 1
                continue
            if reason is not None:
                filtered[reason] += 1
                continue
            loaded = self._loaded_steps[position]
            decode = decode_by_step.get(loaded)
            if decode is None:
                decode = decode_by_step[loaded] = decode_tokens_per_s(SpeedProfile(loaded), terms.bytes_per_token,
                                                                      config.speed)
            if decode < terms.job.min_decode_tokens_per_s:
                filtered[FilterReason.BELOW_MIN_SPEED] += 1
                continue
            # Jobs of one model on one Mac batch: what its running jobs hold for the model is the new job's too.
            free = ceiling - mac.committed_memory_bytes + held_for_model(mac, model_id)
            if free < need:
                filtered[FilterReason.DOES_NOT_FIT] += 1
                continue
            feasible += 1
            fit = best_fit_score(free, need, config.best_fit_span_octaves)
            speed = speed_score(decode, terms.speed_target)
            warm = model_id in mac.warm_models
            quantum = static_score_quantum(mac.reputation, mac.price_per_million_tokens, warm, config)
            score = total_score(w_fit, fit, speed_part(w_speed, speed), static_score(quantum))
            best.offer(position, (score, position, free, fit, speed, warm, decode, Strategy.SINGLE))
        return best.result(filtered, feasible, feasible, _tie(best, terms.seed))

    def single_could_ever_take(self, terms: JobTerms) -> bool:
        model_id = terms.job.model.model_id
        for mac, ceiling, step, _ in self._rows:
            if model_id in mac.served_models and ceiling >= terms.memory.total_bytes:
                decode = decode_tokens_per_s(SpeedProfile(step), terms.bytes_per_token, self.config.speed)
                if decode >= terms.job.min_decode_tokens_per_s:
                    return True
        return False

    def search_pods(self, terms: JobTerms) -> SearchResult:
        config = self.config
        w_fit, w_speed, _, _, _ = config.weights.normalised
        filtered = {reason: 0 for reason in FilterReason}
        best = Best(config.top_candidates_explained)
        feasible = 0
        for position, pod in enumerate(self.snapshot.pods):
            outcome = self._pod_outcome(pod, terms, use_ceilings=False)
            if isinstance(outcome, FilterReason):
                filtered[outcome] += 1
                continue
            plan, free_sum, quantum, warm = outcome
            feasible += 1
            fit = best_fit_score(free_sum, plan.need_bytes, config.best_fit_span_octaves)
            score = total_score(w_fit, fit, speed_part(w_speed, plan.speed), static_score(quantum))
            best.offer(position, (score, position, free_sum, fit, plan.speed, warm, plan.decode_tokens_per_s,
                                  plan.strategy))
        return best.result(filtered, feasible, feasible, _tie(best, terms.seed))

    def pod_could_ever_take(self, terms: JobTerms) -> bool:
        return any(not isinstance(self._pod_outcome(pod, terms, use_ceilings=True), FilterReason)
                   for pod in self.snapshot.pods)

    def _pod_outcome(self, pod: PodCandidate, terms: JobTerms, use_ceilings: bool):
        """The first filter a pod fails, or (plan, summed free, static quantum, warm)."""
        rows = [self._by_node[node_id] for node_id in pod.members]
        macs = [row[0] for row in rows]
        model_id = terms.job.model.model_id
        if not all(model_id in mac.served_models for mac in macs):
            return FilterReason.MODEL_NOT_SERVED
        reasons = [row[3] for row in rows if row[3] is not None]
        if reasons and not use_ceilings:
            return min(reasons, key=list(FilterReason).index)
        plan = plan_pod(pod_topology(pod, self.config.speed), min(row[2] for row in rows), terms, self.config)
        if plan is None:
            return FilterReason.DOES_NOT_FIT
        if plan.decode_tokens_per_s < terms.job.min_decode_tokens_per_s:
            return FilterReason.BELOW_MIN_SPEED
        free = tuple(row[1] - (0 if use_ceilings else row[0].committed_memory_bytes) for row in rows)
        if sum(max(f, 0) for f in free) < plan.need_bytes:
            return FilterReason.DOES_NOT_FIT
        if fit_pod(terms.memory, plan.strategy, terms.job.model.num_layers, free) is None:
            return FilterReason.DOES_NOT_FIT
        warm = all(model_id in mac.warm_models for mac in macs)
        quantum = static_score_quantum(min(mac.reputation for mac in macs),
                                       sum(mac.price_per_million_tokens for mac in macs), warm, self.config)
        return plan, sum(max(f, 0) for f in free), quantum, warm


def _tie(best: Best, seed: int) -> tuple | None:
    if not best.ties:
        return None
    tied = sorted(best.ties, key=itemgetter(0))
    return tied[seed % len(tied)][1]


def place_exhaustive(job: JobRequest, snapshot: FleetSnapshot,
                     config: PlacementConfig = PlacementConfig()) -> Placement | Unplaceable:
    return decide(job, ExhaustiveView(snapshot, config), config)
