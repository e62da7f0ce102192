"""The decision: filter, score, select; a single Mac first, a pod only when no Mac will do.

    place(job, fleet)  ->  Placement | Unplaceable

`fleet` is a FleetIndex (build it once, keep it current with try_commit/release/
replace_mac) or a FleetSnapshot (indexed on first use; the last one is cached). A re-run's
excluded nodes are filtered out of the index for its decision (FilterReason.EXCLUDED).
The same stages run over the exhaustive view in exhaustive.py, which scores every
candidate; the benchmark and tests compare the two.
"""

from __future__ import annotations

from typing import Protocol

from coordinator.placement.assemble import mac_placement, pod_placement, ranked_mac, ranked_pod
from coordinator.placement.candidates import FleetSnapshot, JobRequest, MacCandidate, PodCandidate
from coordinator.placement.config import PlacementConfig
from coordinator.placement.decision import Placement, Unplaceable
from coordinator.placement.explain import Explanation
from coordinator.placement.filters import FilterReason, counts_tuple
from coordinator.placement.index import FleetIndex
from coordinator.placement.pod_search import pod_could_ever_take, search_pods
from coordinator.placement.search import SearchResult, search_macs, single_could_ever_take
from coordinator.placement.terms import JobTerms, job_terms

GB = 1e9


class FleetView(Protocol):
    """What the decision needs from a fleet; positions are the view's own."""

    @property
    def mac_count(self) -> int: ...
    @property
    def pod_count(self) -> int: ...

    def search_macs(self, terms: JobTerms) -> SearchResult: ...
    def single_could_ever_take(self, terms: JobTerms) -> bool: ...
    def search_pods(self, terms: JobTerms) -> SearchResult: ...
    def pod_could_ever_take(self, terms: JobTerms) -> bool: ...
    def mac_at(self, position: int) -> MacCandidate: ...  # for facts other than its commitments
    def pod_at(self, position: int) -> tuple[PodCandidate, tuple[MacCandidate, ...]]: ...  # facts, as mac_at
    def pod_free_bytes(self, position: int) -> tuple[int, ...]: ...  # each member's free memory now


class IndexView:
    def __init__(self, index: FleetIndex) -> None:
        self.index = index

    @property
    def mac_count(self) -> int:
        return self.index.mac_count

    @property
    def pod_count(self) -> int:
        return self.index.pod_count

    def search_macs(self, terms: JobTerms) -> SearchResult:
        return search_macs(self.index, terms)

    def single_could_ever_take(self, terms: JobTerms) -> bool:
        return single_could_ever_take(self.index, terms)

    def search_pods(self, terms: JobTerms) -> SearchResult:
        return search_pods(self.index, terms)

    def pod_could_ever_take(self, terms: JobTerms) -> bool:
        return pod_could_ever_take(self.index, terms)

    def mac_at(self, position: int) -> MacCandidate:
        """The Mac's reported facts; its commitments may be older than the index's (Scored has free memory)."""
        slot = self.index.mac_slots[position]
        assert slot is not None
        return slot.candidate

    def pod_at(self, position: int) -> tuple[PodCandidate, tuple[MacCandidate, ...]]:
        slot = self.index.pod_slots[position]
        assert slot is not None
        return slot.candidate, tuple(member.candidate for member in slot.members)

    def pod_free_bytes(self, position: int) -> tuple[int, ...]:
        slot = self.index.pod_slots[position]
        assert slot is not None
        return self.index.pod_free_bytes(slot)


_last_indexed: tuple[FleetSnapshot, PlacementConfig, FleetIndex] | None = None


def index_for(snapshot: FleetSnapshot, config: PlacementConfig) -> FleetIndex:
    """Index a snapshot, reusing the last index when asked about the same snapshot again."""
    global _last_indexed
    cached = _last_indexed
    if cached is not None and cached[0] is snapshot and cached[1] == config:
        return cached[2]
    index = FleetIndex.build(snapshot, config)
    _last_indexed = (snapshot, config, index)
    return index


def place(job: JobRequest, fleet: FleetSnapshot | FleetIndex, config: PlacementConfig | None = None,
          excluded: frozenset[str] = frozenset()) -> Placement | Unplaceable:
    """excluded: nodes that may not take this job (they failed its check; it is their job's re-run)."""
    if isinstance(fleet, FleetIndex):
        assert config is None or config is fleet.config or config == fleet.config, \
            "the index was built with another config"
        index = fleet
    else:
        index = index_for(fleet, config if config is not None else PlacementConfig())
    if not excluded:
        return decide(job, _view_of(index), index.config)
    held = index.exclude(excluded)  # a filter on the index for this decision, undone before it returns
    try:
        return decide(job, _view_of(index), index.config)
    finally:
        index.readmit(held)


def _view_of(index: FleetIndex) -> IndexView:
    return IndexView(index)  # one small object a decision: cheaper than the index knowing the planner


def decide(job: JobRequest, view: FleetView, config: PlacementConfig) -> Placement | Unplaceable:
    terms = job_terms(job, config)
    macs = view.search_macs(terms)
    if macs.top:
        explanation = _explain(terms, view, macs, None, config)
        return mac_placement(terms, view.mac_at(macs.top[0].position), macs.top[0], explanation, config)
    single_ever = view.single_could_ever_take(terms)
    if single_ever and config.reserve_pods_for_jobs_no_mac_can_take:
        note = "a single Mac could take this job when one frees up; pods are kept for jobs no Mac can take"
        explanation = _explain(terms, view, macs, None, config, (note,))
        return Unplaceable(False, _waiting_reason(terms, "a Mac"), explanation, job.job_id)
    pods = view.search_pods(terms)
    if pods.top:
        explanation = _explain(terms, view, macs, pods, config)
        chosen = pods.top[0]
        pod, members = view.pod_at(chosen.position)
        return pod_placement(terms, pod, members, view.pod_free_bytes(chosen.position), chosen, explanation, config)
    explanation = _explain(terms, view, macs, pods, config)
    if single_ever or view.pod_could_ever_take(terms):
        return Unplaceable(False, _waiting_reason(terms, "a Mac or pod"), explanation, job.job_id)
    return Unplaceable(True, _never_reason(terms, view, macs, pods), explanation, job.job_id)


def _explain(terms: JobTerms, view: FleetView, macs: SearchResult, pods: SearchResult | None,
             config: PlacementConfig, notes: tuple[str, ...] = ()) -> Explanation:
    if pods is not None and pods.top:
        ranked = tuple([ranked_pod(*view.pod_at(s.position), s) for s in pods.top])
    else:
        ranked = tuple([ranked_mac(view.mac_at(s.position), s) for s in macs.top])
    chosen = ranked[0].candidate_id if ranked else None
    return Explanation(
        job_id=terms.job.job_id, model_id=terms.job.model.model_id, memory=terms.memory,
        macs_total=view.mac_count, mac_filtered=counts_tuple(macs.filtered), macs_feasible=macs.feasible,
        macs_scored=macs.scored, pods_total=view.pod_count, pods_considered=pods is not None,
        pod_filtered=counts_tuple(pods.filtered) if pods else (), pods_feasible=pods.feasible if pods else 0,
        pods_scored=pods.scored if pods else 0, ranked=ranked,
        price_reference_per_million_tokens=config.price_reference_per_million_tokens, chosen_id=chosen, notes=notes)


def _needs(terms: JobTerms) -> str:
    speed = terms.job.min_decode_tokens_per_s
    text = f"{terms.job.model.model_id} with {terms.job.context_tokens} tokens of context needs " \
           f"{terms.memory.total_bytes / GB:.1f} GB"
    return text + (f" at {speed:g} tokens/s or more" if speed > 0 else "")


def _waiting_reason(terms: JobTerms, what: str) -> str:
    return f"{_needs(terms)}; {what} that could take it is busy, offline, owner-active or full now, so it waits."


def _never_reason(terms: JobTerms, view: FleetView, macs: SearchResult, pods: SearchResult) -> str:
    unserved_macs = macs.filtered.get(FilterReason.MODEL_NOT_SERVED, 0)
    unserved_pods = pods.filtered.get(FilterReason.MODEL_NOT_SERVED, 0)
    if unserved_macs == view.mac_count and unserved_pods == view.pod_count:
        return f"No Mac or pod in the network serves {terms.job.model.model_id}."
    return f"{_needs(terms)}; no Mac or pod serving it could ever provide that, even when idle."
