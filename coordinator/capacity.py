"""Live capacity per model (GET /v1/models): the Macs serving it, and those that could start now.

Pure over a fleet snapshot: each online Mac serving a model is asked, alone, whether
the planner would place a job of CAPACITY_CONTEXT_TOKENS on it now, and how fast
it predicts that job would decode.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.ids import JobId
from contracts.models import ModelSpec
from coordinator.catalog import model_catalog
from coordinator.placement.candidates import FleetSnapshot, JobRequest
from coordinator.placement.decision import Placement
from coordinator.placement.planner import place
from coordinator.records import NodeRecord

CAPACITY_CONTEXT_TOKENS = 4_096  # the job size the figures are for (capped by the model's context)
MACS_PER_MODEL_MAX = 256  # Macs asked per model; the count stops there


@dataclass(frozen=True)
class ModelCapacity:
    spec: ModelSpec
    first_registered_ms: int  # when the first node serving it registered
    macs_serving: int
    macs_available: int
    predicted_decode_tokens_per_s: float  # the fastest available Mac's; 0 when none
    context_tokens: int


def model_capacity(fleet: FleetSnapshot, nodes: list[NodeRecord]) -> list[ModelCapacity]:
    """Every model some node serves, by id, with its live capacity."""
    capacities = []
    for model_id, spec in sorted(model_catalog(nodes).items()):
        context_tokens = min(spec.max_context_tokens, CAPACITY_CONTEXT_TOKENS)
        request = JobRequest(job_id=JobId("capacity"), model=spec, context_tokens=context_tokens)
        serving = [mac for mac in fleet.macs if mac.online and model_id in mac.served_models]
        serving = serving[:MACS_PER_MODEL_MAX]
        placements = [decision for mac in serving
                      if isinstance(decision := place(request, FleetSnapshot(macs=(mac,))), Placement)]
        capacities.append(ModelCapacity(
            spec=spec,
            first_registered_ms=min(n.registered_at_ms for n in nodes if n.model(model_id)),
            macs_serving=len(serving), macs_available=len(placements),
            predicted_decode_tokens_per_s=max((p.predicted_decode_tokens_per_s for p in placements),
                                              default=0.0),
            context_tokens=context_tokens))
    return capacities
