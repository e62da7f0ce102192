"""Live capacity per model (GET /v1/models): the Macs serving it, and those that could start now.

Pure over the placement index: a Mac counts as available when the planner would place
a job of CAPACITY_CONTEXT_TOKENS on it now, alone (it is online, not busy, its owner is
away, and the job fits its free memory), which is every Mac in the model's groups from
where such a job starts to fit. The predicted speed is the fastest such Mac's. A read
costs a bisect per speed group, whatever the number of Macs.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from contracts.ids import JobId
from contracts.models import ModelSpec
from coordinator.placement.candidates import JobRequest
from coordinator.placement.filters import FilterReason
from coordinator.placement.index import FREE_SHIFT, FleetIndex
from coordinator.placement.speed import decode_from_bandwidth
from coordinator.placement.terms import job_terms

CAPACITY_CONTEXT_TOKENS = 4_096  # the job size the figures are for (capped by the model's context)


@dataclass(frozen=True)
class ModelCapacity:
    spec: ModelSpec
    first_registered_ms: int  # when the first node serving it registered
    macs_serving: int  # online, not quarantined
    macs_available: int
    predicted_decode_tokens_per_s: float  # the fastest available Mac's; 0 when none
    context_tokens: int


def model_capacity(index: FleetIndex, catalog: dict[str, ModelSpec],
                   first_registered_ms: dict[str, int]) -> list[ModelCapacity]:
    """Every model in the catalog, by id, with its live capacity on the index's Macs."""
    capacities = []
    for model_id, spec in sorted(catalog.items()):
        context_tokens = min(spec.max_context_tokens, CAPACITY_CONTEXT_TOKENS)
        terms = job_terms(JobRequest(job_id=JobId("capacity"), model=spec, context_tokens=context_tokens),
                          index.config)
        entry = index.mac_models.get(model_id)
        serving = available = 0
        fastest = 0.0
        if entry is not None:
            serving = entry.served - entry.unavailable.get(FilterReason.OFFLINE, 0)
            fits_from = terms.memory.total_bytes << FREE_SHIFT
            for bandwidth, group, _ in entry.mac_groups:
                fitting = len(group.keys) - bisect_left(group.keys, fits_from)
                if fitting:
                    available += fitting
                    fastest = max(fastest, decode_from_bandwidth(bandwidth, 1.0, 0, 0.0, terms.bytes_per_token))
        capacities.append(ModelCapacity(spec, first_registered_ms[model_id], serving, available, fastest,
                                        context_tokens))
    return capacities
