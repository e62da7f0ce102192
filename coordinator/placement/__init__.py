"""The placement core: a pure planner that puts each whole job on one Mac or one pod.

Stages, as in Nomad's scheduler: feasibility filters with named reasons, scorers with
named scores, normalise and combine, select with a seeded tie-break. No I/O here.

    index = FleetIndex.build(snapshot, config)       # once; keep it current with
    decision = place(job, index)                      #   try_commit / release / replace_mac
    if isinstance(decision, Placement) and index.try_commit(decision): ...

`place(job, snapshot)` also works: it indexes the snapshot (and reuses the index while
it is asked about the same snapshot object again).

Modules: candidates (inputs), config (every constant), memory (estimate, ceilings, layer
split), speed (bandwidth model), pods (strategy, shares), filters, scoring, index (the
fleet sorted for fast search), search / pod_search (the index's search), exhaustive
(the reference that scores everyone), planner (the decision), assemble and explain
(the Placement and its Explanation).

The decision's and the commit's modules are compiled with mypyc when the project is
installed (setup.py; the list is in compiled.py). Compiled, their type annotations are
checked as they run, so keep them true; `mypy coordinator/placement` must pass to build.
"""

from coordinator.placement.candidates import (
    FleetSnapshot, JobRequest, LendingMode, MacCandidate, PodCandidate, PodLink,
)
from coordinator.placement.config import MemoryConfig, PlacementConfig, ScoreWeights, SpeedConfig
from coordinator.placement.decision import Placement, Unplaceable
from coordinator.placement.exhaustive import place_exhaustive
from coordinator.placement.explain import CandidateScore, Explanation
from coordinator.placement.filters import FilterReason
from coordinator.placement.index import FleetIndex
from coordinator.placement.memory import MemoryEstimate, estimate_job_memory, split_layers_by_memory
from coordinator.placement.planner import place
from coordinator.placement.scoring import ScoreName
from coordinator.placement.vocabulary import CandidateKind, Strategy

__all__ = [
    "CandidateKind", "CandidateScore", "Explanation", "FilterReason", "FleetIndex", "FleetSnapshot",
    "JobRequest", "LendingMode", "MacCandidate", "MemoryConfig", "MemoryEstimate", "Placement",
    "PlacementConfig", "PodCandidate", "PodLink", "ScoreName", "ScoreWeights", "SpeedConfig", "Strategy",
    "Unplaceable", "estimate_job_memory", "place", "place_exhaustive", "split_layers_by_memory",
]
