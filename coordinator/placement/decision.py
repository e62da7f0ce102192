"""What the planner returns: a Placement, or an Unplaceable that says whether to wait."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.ids import JobId, NodeId
from coordinator.placement.explain import Explanation
from coordinator.placement.vocabulary import Strategy


@dataclass(frozen=True)
class Placement:
    node_ids: tuple[NodeId, ...]  # one for a single Mac; a pod's members in pipeline order
    pod_id: str | None
    strategy: Strategy
    # Layers each member holds, aligned with node_ids: (num_layers,) for a single Mac, every
    # member's shard of all layers for tensor parallel, consecutive runs for a pipeline.
    layer_split: tuple[int, ...]
    reserved_memory_bytes: tuple[int, ...]  # per member, aligned with node_ids
    predicted_decode_tokens_per_s: float
    predicted_prefill_tokens_per_s: float
    predicted_time_to_first_token_s: float
    explanation: Explanation
    job_id: JobId = JobId("")
    score: float = 0.0  # the combined score that won, 0..1

    def __post_init__(self) -> None:
        members = len(self.node_ids)
        assert members >= 1 and len(self.layer_split) == members == len(self.reserved_memory_bytes)
        assert (self.pod_id is None) == (self.strategy is Strategy.SINGLE) == (members == 1)
        assert min(self.reserved_memory_bytes) > 0 and min(self.layer_split) >= 1


@dataclass(frozen=True)
class Unplaceable:
    # True: nothing in the fleet could ever take this job, even idle; False: wait in the queue.
    permanent: bool
    reason: str  # one human sentence
    explanation: Explanation
    job_id: JobId = JobId("")
