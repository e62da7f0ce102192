"""A scheduler harness: describe a fleet in a few lines, place jobs, look at the decisions.

Hardware figures are the chip table's marketed bandwidths (the brief's "Facts a
scheduler needs"); GPU working sets use macOS's default of about 75% of RAM.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from contracts.hardware import ChipTier, HardwareReport, LinkKind
from contracts.ids import JobId, NodeId
from contracts.models import ModelSpec
from coordinator.placement import (
    FleetIndex, FleetSnapshot, JobRequest, LendingMode, MacCandidate, Placement, PlacementConfig,
    PodCandidate, PodLink, Unplaceable, place,
)

GIB = 1 << 30


@dataclass(frozen=True)
class Chip:
    name: str
    family: str
    tier: ChipTier
    bandwidth_gb_s: float
    gpu_cores: int


M4 = Chip("Apple M4", "M4", ChipTier.BASE, 120.0, 10)
M4_PRO = Chip("Apple M4 Pro", "M4", ChipTier.PRO, 273.0, 20)
M4_MAX = Chip("Apple M4 Max", "M4", ChipTier.MAX, 546.0, 40)
M3_ULTRA = Chip("Apple M3 Ultra", "M3", ChipTier.ULTRA, 819.0, 80)


def hardware(chip: Chip, memory_gib: int) -> HardwareReport:
    memory = memory_gib * GIB
    return HardwareReport(chip=chip.name, chip_family=chip.family, chip_tier=chip.tier, memory_bytes=memory,
                          gpu_working_set_bytes=memory * 3 // 4, gpu_cores=chip.gpu_cores,
                          memory_bandwidth_gb_s=chip.bandwidth_gb_s, os_name="macOS 26.2")


def model(model_id: str, parameters: float, bits: float, layers: int, heads: int, kv_heads: int,
          head_dim: int = 128, max_context: int = 131072) -> ModelSpec:
    return ModelSpec(model_id=model_id, weights_bytes=int(parameters * bits / 8), parameter_count=int(parameters),
                     num_layers=layers, num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                     max_context_tokens=max_context)


QWEN3_4B_4BIT = model("qwen3-4b-4bit", 4.02e9, 4.5, 36, 32, 8)
LLAMA_70B_4BIT = model("llama-70b-4bit", 70.6e9, 4.5, 80, 64, 8)
# Kimi K2 Thinking: 1.03T parameters (32B active) at native int4, 61 layers, 64 heads.
KIMI_K2_4BIT = model("kimi-k2-4bit", 1.03e12, 4.6, 61, 64, 64)
KIMI_K2_ACTIVE_BYTES = int(32e9 * 4.6 / 8)


class Fleet:
    """Builds a FleetSnapshot: add Macs and pods, then place jobs against it."""

    def __init__(self, config: PlacementConfig = PlacementConfig()) -> None:
        self.config = config
        self.macs: dict[NodeId, MacCandidate] = {}
        self.pods: list[PodCandidate] = []
        self._counter = itertools.count()

    def mac(self, chip: Chip, memory_gib: int, models: tuple[ModelSpec, ...], name: str | None = None,
            **overrides) -> NodeId:
        node_id = NodeId(name or f"node-{chip.family.lower()}-{chip.tier}-{memory_gib}-{next(self._counter)}")
        fields = dict(node_id=node_id, hardware=hardware(chip, memory_gib), online=True, committed_memory_bytes=0,
                      running_jobs=0, max_concurrent_jobs=2, served_models=frozenset(m.model_id for m in models))
        fields.update(overrides)
        self.macs[node_id] = MacCandidate(**fields)
        return node_id

    def pod(self, pod_id: str, chip: Chip, memory_gib: int, members: int, link: LinkKind,
            models: tuple[ModelSpec, ...], **overrides) -> tuple[NodeId, ...]:
        overrides.setdefault("mode", LendingMode.DEDICATED)
        node_ids = tuple(self.mac(chip, memory_gib, models, name=f"{pod_id}-m{i}", **overrides)
                         for i in range(members))
        links = tuple(PodLink(a, b, link) for a, b in itertools.combinations(node_ids, 2))
        self.pods.append(PodCandidate(pod_id, node_ids, links))
        return node_ids

    def update(self, node_id: NodeId, **changes) -> None:
        self.macs[node_id] = replace(self.macs[node_id], **changes)

    def snapshot(self) -> FleetSnapshot:
        return FleetSnapshot(tuple(self.macs.values()), tuple(self.pods))

    def index(self) -> FleetIndex:
        return FleetIndex.build(self.snapshot(), self.config)

    def place(self, job: JobRequest) -> Placement | Unplaceable:
        return place(job, self.snapshot(), self.config)


def job(spec: ModelSpec, context_tokens: int = 4096, min_speed: float = 0.0, name: str = "job-1",
        **extra) -> JobRequest:
    return JobRequest(job_id=JobId(name), model=spec, context_tokens=context_tokens,
                      min_decode_tokens_per_s=min_speed, **extra)


def must_place(decision: Placement | Unplaceable) -> Placement:
    assert isinstance(decision, Placement), decision.reason if isinstance(decision, Unplaceable) else decision
    return decision


def must_refuse(decision: Placement | Unplaceable) -> Unplaceable:
    assert isinstance(decision, Unplaceable), f"placed on {decision.node_ids}"
    return decision
