"""The job as every stage sees it: computed once per decision."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final, NamedTuple

from contracts.models import ModelSpec
from coordinator.placement.candidates import JobRequest
from coordinator.placement.config import MemoryConfig, PlacementConfig
from coordinator.placement.memory import (
    MemoryEstimate, estimate_job_memory, pipeline_shares_bytes, tensor_shares_bytes,
)
from coordinator.placement.pods import PodTopology, can_split, pod_speed_profile, pod_strategy
from coordinator.placement.scoring import speed_score, speed_target
from coordinator.placement.speed import SpeedProfile, bytes_read_per_token, decode_tokens_per_s
from coordinator.placement.vocabulary import Strategy


class JobTerms(NamedTuple):
    """A named tuple: one is made per decision, and a tuple is quicker to make than a frozen dataclass."""

    job: JobRequest
    memory: MemoryEstimate
    bytes_per_token: int  # weights read per token plus the KV cache at full context
    speed_target: float

    @property
    def seed(self) -> int:
        """Breaks ties; derived from the job id so a retry lands the same way. Hashed only when a tie needs it."""
        return job_seed(self.job.job_id)


@dataclass(frozen=True)
class PodPlan:
    """How this job would run on pods of one topology and slowest member."""

    strategy: Strategy
    profile: SpeedProfile
    decode_tokens_per_s: float
    speed: float  # the speed score
    need_bytes: int  # in all, counting every member's fixed overhead


# (model, context, active bytes, memory config) -> (model, memory config, memory estimate, bytes per token).
# Keyed by the objects' identities: hashing a ModelSpec's fields costs more than the lookup saves.
# Each entry holds its model and config, so an id in a key is never reused while the entry lives.
_shapes: dict[tuple[int, int, int | None, int], tuple[ModelSpec, MemoryConfig, MemoryEstimate, int]] = {}
SHAPES_MAX: Final = 1024  # jobs share a few models and context lengths; past this the memory starts afresh


def _job_shape(job: JobRequest, config: MemoryConfig) -> tuple[MemoryEstimate, int]:
    """estimate_job_memory and bytes_read_per_token, remembered."""
    key = (id(job.model), job.context_tokens, job.active_weights_bytes, id(config))
    known = _shapes.get(key)
    if known is None or known[0] is not job.model or known[1] is not config:
        if len(_shapes) >= SHAPES_MAX:
            _shapes.clear()
        known = _shapes[key] = (job.model, config, estimate_job_memory(job.model, job.context_tokens, config),
                                bytes_read_per_token(job))
    return known[2], known[3]


def job_seed(job_id: str) -> int:
    return int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big")


def job_terms(job: JobRequest, config: PlacementConfig) -> JobTerms:
    memory, bytes_per_token = _job_shape(job, config.memory)
    target = speed_target(job.min_decode_tokens_per_s, config)
    return tuple.__new__(JobTerms, (job, memory, bytes_per_token, target))  # in C, not the named tuple's __new__


@dataclass(frozen=True)
class TopologyPlan:
    """The part of a pod plan that depends only on the topology, shared by its classes."""

    strategy: Strategy
    speedup: float
    hops: int
    hop_latency_s: float
    need_bytes: int
    # The least every member must have free: its tensor share, or one layer's share in a pipeline.
    member_min_bytes: int


def plan_topology(topology: PodTopology, terms: JobTerms, config: PlacementConfig) -> TopologyPlan | None:
    """None when the model cannot be split over this many members (fewer layers than members)."""
    strategy = pod_strategy(topology, terms.job.model)
    if not can_split(strategy, terms.job.model, topology.members):
        return None
    profile = pod_speed_profile(topology, strategy, 0, config.speed)
    memory, layers = terms.memory, terms.job.model.num_layers
    if strategy is Strategy.TENSOR:
        member_min = tensor_shares_bytes(memory, topology.members)[0]
    else:
        member_min = pipeline_shares_bytes(memory, layers, (1,))[0]
    return TopologyPlan(strategy, profile.parallel_speedup, profile.hops, profile.hop_latency_s,
                        memory.pod_total_bytes(topology.members), member_min)


def plan_pod(topology: PodTopology, slowest_step: int, terms: JobTerms, config: PlacementConfig) -> PodPlan | None:
    shared = plan_topology(topology, terms, config)
    if shared is None:
        return None
    profile = SpeedProfile(slowest_step, shared.speedup, shared.hops, shared.hop_latency_s)
    decode = decode_tokens_per_s(profile, terms.bytes_per_token, config.speed)
    return PodPlan(shared.strategy, profile, decode, speed_score(decode, terms.speed_target), shared.need_bytes)
