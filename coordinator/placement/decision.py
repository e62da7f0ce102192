"""What the planner returns: a Placement, or an Unplaceable that says whether to wait."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.ids import JobId, NodeId
from coordinator.placement.explain import Explanation
from coordinator.placement.vocabulary import SINGLE, Strategy


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

    def __init__(self, node_ids: tuple[NodeId, ...], pod_id: str | None, strategy: Strategy,
                 layer_split: tuple[int, ...], reserved_memory_bytes: tuple[int, ...],
                 predicted_decode_tokens_per_s: float, predicted_prefill_tokens_per_s: float,
                 predicted_time_to_first_token_s: float, explanation: Explanation, job_id: JobId = JobId(""),
                 score: float = 0.0) -> None:
        # Written out, as Explanation's is (see there): one update of the instance dict, then the checks.
        self.__dict__.update(
            node_ids=node_ids, pod_id=pod_id, strategy=strategy, layer_split=layer_split,
            reserved_memory_bytes=reserved_memory_bytes, predicted_decode_tokens_per_s=predicted_decode_tokens_per_s,
            predicted_prefill_tokens_per_s=predicted_prefill_tokens_per_s,
            predicted_time_to_first_token_s=predicted_time_to_first_token_s, explanation=explanation, job_id=job_id,
            score=score)
        self.__post_init__()

    def __post_init__(self) -> None:
        members = len(self.node_ids)
        assert members >= 1 and len(self.layer_split) == members == len(self.reserved_memory_bytes)
        assert (self.pod_id is None) == (self.strategy is SINGLE) == (members == 1)
        assert min(self.reserved_memory_bytes) > 0 and min(self.layer_split) >= 1


@dataclass(frozen=True)
class Unplaceable:
    # True: nothing in the fleet could ever take this job, even idle; False: wait in the queue.
    permanent: bool
    reason: str  # one human sentence
    explanation: Explanation
    job_id: JobId = JobId("")
