"""What the planner decides over: a job, the Macs and pods that might take it, and a snapshot."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from contracts.hardware import HardwareReport, LinkKind
from contracts.ids import JobId, NodeId
from contracts.models import ModelSpec


class LendingMode(StrEnum):
    IDLE = "idle"  # lends only while the owner is away, and keeps the owner a reserve
    DEDICATED = "dedicated"  # lent full-time (a dedicated seat): no owner reserve


@dataclass(frozen=True)
class JobRequest:
    job_id: JobId
    model: ModelSpec
    context_tokens: int  # prompt plus generation budget: the KV cache is sized for all of it
    min_decode_tokens_per_s: float = 0.0  # 0 means any speed will do
    # Bytes read per generated token when it differs from the weights (mixture-of-experts
    # models read only the active experts). None means a dense model.
    active_weights_bytes: int | None = None
    prompt_tokens: int | None = None  # for the time to first token; None means context_tokens

    def __post_init__(self) -> None:
        assert self.context_tokens > 0, "a job needs at least one token of context"
        assert self.min_decode_tokens_per_s >= 0.0
        assert self.active_weights_bytes is None or 0 < self.active_weights_bytes <= self.model.weights_bytes
        assert self.prompt_tokens is None or 0 <= self.prompt_tokens <= self.context_tokens

    @property
    def weights_read_per_token_bytes(self) -> int:
        return self.active_weights_bytes if self.active_weights_bytes is not None else self.model.weights_bytes


@dataclass(frozen=True)
class MacCandidate:
    node_id: NodeId
    hardware: HardwareReport
    online: bool
    committed_memory_bytes: int  # reserved by jobs already assigned to this Mac
    running_jobs: int
    max_concurrent_jobs: int
    served_models: frozenset[str]
    warm_models: frozenset[str] = frozenset()  # loaded in memory now: no load time
    mode: LendingMode = LendingMode.IDLE
    owner_active: bool = False
    reputation: float = 1.0  # 0..1
    measured_bandwidth_gb_s: float | None = None  # from the node's own benchmark
    memory_cap_bytes: int | None = None  # the operator's cap on what the network may use
    price_per_million_tokens: int = 0  # base units of the MLX token
    measured_decode_efficiency: float | None = None  # η from the node's own benchmark
    # (model id, bytes, jobs): a model's weights and runtime, held once in committed_memory_bytes
    # and shared by this many running jobs of it (jobs of one model batch on one Mac). By model id.
    shared_memory: tuple[tuple[str, int, int], ...] = ()
    # (jobs decoding together, their tokens/s in all), sizes ascending, from the node's own benchmark:
    # a job's speed here counts the jobs already running (speed.batch_share). Empty: not measured.
    batch_decode_tokens_per_s: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        assert self.committed_memory_bytes >= 0 and self.running_jobs >= 0
        assert [model_id for model_id, _, _ in self.shared_memory] == sorted({m for m, _, _ in self.shared_memory})
        assert all(held > 0 and jobs >= 1 for _, held, jobs in self.shared_memory)
        assert sum(jobs for _, _, jobs in self.shared_memory) <= self.running_jobs
        sizes = [size for size, _ in self.batch_decode_tokens_per_s]
        assert sizes == sorted(set(sizes)) and all(size >= 1 for size in sizes)
        assert all(rate > 0 for _, rate in self.batch_decode_tokens_per_s)
        assert self.max_concurrent_jobs >= 0
        assert 0.0 <= self.reputation <= 1.0, "reputation is a fraction"
        assert self.price_per_million_tokens >= 0
        assert self.memory_cap_bytes is None or self.memory_cap_bytes >= 0
        assert self.measured_bandwidth_gb_s is None or self.measured_bandwidth_gb_s > 0
        assert self.measured_decode_efficiency is None or 0 < self.measured_decode_efficiency <= 1


@dataclass(frozen=True)
class PodLink:
    """One cable (or bonded pair of cables) between two members of a pod."""

    a: NodeId
    b: NodeId
    kind: LinkKind
    cables: int = 1  # two cables between a pair double the bandwidth

    def __post_init__(self) -> None:
        assert self.a != self.b, "a link joins two different Macs"
        assert self.cables >= 1


@dataclass(frozen=True)
class PodCandidate:
    """Macs cabled together on one desk; members reference MacCandidates of the same snapshot."""

    pod_id: str
    members: tuple[NodeId, ...]
    links: tuple[PodLink, ...]

    def __post_init__(self) -> None:
        assert self.pod_id, "pod_id must not be empty"
        assert len(self.members) >= 2, "a pod has at least two members"
        assert len(set(self.members)) == len(self.members), "pod members must be distinct"
        member_set = set(self.members)
        assert self.links, "a pod's members must be cabled"
        for link in self.links:
            assert link.a in member_set and link.b in member_set, "links join members of the pod"


@dataclass(frozen=True)
class FleetSnapshot:
    macs: tuple[MacCandidate, ...]
    pods: tuple[PodCandidate, ...] = field(default=())
