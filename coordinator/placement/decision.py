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
    # Of a single Mac's reservation, what jobs of the model there share (its weights and runtime):
    # committed once while any of them runs. 0 on a pod: pod ranks do not batch.
    shared_memory_bytes: int = 0

    @property
    def model_id(self) -> str:
        return self.explanation.model_id

    def __post_init__(self) -> None:
        members = len(self.node_ids)
        assert 0 <= self.shared_memory_bytes <= self.reserved_memory_bytes[0]
        assert self.pod_id is None or self.shared_memory_bytes == 0, "pod ranks do not share memory"
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
