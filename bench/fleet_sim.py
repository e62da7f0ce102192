"""A simulated fleet and job mix for the placement benchmark.

Macs follow a plausible mix of what people lend: many Mac minis and MacBook Pros,
fewer Studios, and pods of 2-4 Studios cabled with RDMA or TCP. Bandwidths are the
chip table's marketed figures; everything else (mix, prices, reputations, load) is
invented for the benchmark and says nothing about a real fleet.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

from contracts.hardware import ChipTier, HardwareReport, LinkKind
from contracts.ids import JobId, NodeId
from contracts.models import ModelSpec
from coordinator.placement import (
    FleetSnapshot, JobRequest, LendingMode, MacCandidate, PlacementConfig, PodCandidate, PodLink,
    estimate_job_memory,
)
from coordinator.placement.memory import mac_ceiling_bytes

GIB = 1 << 30


@dataclass(frozen=True)
class MacKind:
    name: str
    chip: str
    family: str
    tier: ChipTier
    bandwidth_gb_s: float
    gpu_cores: int
    memory_gib: tuple[int, ...]
    share: float  # of the fleet
    dedicated_share: float  # of this kind lent full-time
    laptop: bool = False


MAC_KINDS = (
    MacKind("Mac mini M4", "Apple M4", "M4", ChipTier.BASE, 120, 10, (16, 24, 32), 0.28, 0.05),
    MacKind("Mac mini M4 Pro", "Apple M4 Pro", "M4", ChipTier.PRO, 273, 20, (24, 48, 64), 0.18, 0.15),
    MacKind("MacBook Pro M4 Pro", "Apple M4 Pro", "M4", ChipTier.PRO, 273, 20, (24, 48), 0.12, 0.0, True),
    MacKind("MacBook Pro M4 Max (binned)", "Apple M4 Max", "M4", ChipTier.MAX, 410, 32, (36,), 0.04, 0.0, True),
    MacKind("MacBook Pro M4 Max", "Apple M4 Max", "M4", ChipTier.MAX, 546, 40, (48, 64, 128), 0.08, 0.0, True),
    MacKind("Mac Studio M4 Max", "Apple M4 Max", "M4", ChipTier.MAX, 546, 40, (36, 64, 128), 0.10, 0.4),
    MacKind("Mac Studio M3 Ultra", "Apple M3 Ultra", "M3", ChipTier.ULTRA, 819, 80, (96, 256, 512), 0.06, 0.8),
    MacKind("MacBook Pro M1 Pro", "Apple M1 Pro", "M1", ChipTier.PRO, 200, 16, (16, 32), 0.08, 0.0, True),
    MacKind("Mac Studio M2 Ultra", "Apple M2 Ultra", "M2", ChipTier.ULTRA, 800, 76, (64, 128, 192), 0.06, 0.5),
)
STUDIO_M3_ULTRA, STUDIO_M4_MAX = MAC_KINDS[6], MAC_KINDS[5]


@dataclass(frozen=True)
class ModelKind:
    spec: ModelSpec
    active_parameters: float  # differs from parameter_count for mixture-of-experts models
    share: float  # of jobs
    bits: float

    @property
    def active_weights_bytes(self) -> int | None:
        if self.active_parameters >= self.spec.parameter_count:
            return None
        return int(self.active_parameters * self.bits / 8)


def _model(model_id: str, parameters: float, bits: float, layers: int, heads: int, kv_heads: int, head_dim: int,
           share: float, active: float | None = None, max_context: int = 131072) -> ModelKind:
    spec = ModelSpec(model_id=model_id, weights_bytes=int(parameters * bits / 8), parameter_count=int(parameters),
                     num_layers=layers, num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                     max_context_tokens=max_context)
    return ModelKind(spec, active or parameters, share, bits)


# Architectures follow the public configs; MLA caches are approximated as 8 heads of 64.
MODELS = (
    _model("llama-3.2-1b-4bit", 1.24e9, 4.5, 16, 32, 8, 64, 0.13),
    _model("llama-3.2-3b-4bit", 3.21e9, 4.5, 28, 24, 8, 128, 0.10),
    _model("qwen3-4b-4bit", 4.02e9, 4.5, 36, 32, 8, 128, 0.12),
    _model("qwen3-4b-bf16", 4.02e9, 16, 36, 32, 8, 128, 0.04),
    _model("llama-3.1-8b-4bit", 8.03e9, 4.5, 32, 32, 8, 128, 0.12),
    _model("llama-3.1-8b-8bit", 8.03e9, 8.5, 32, 32, 8, 128, 0.04),
    _model("qwen3-14b-4bit", 14.8e9, 4.5, 40, 40, 8, 128, 0.08),
    _model("qwen3-32b-4bit", 32.8e9, 4.5, 64, 64, 8, 128, 0.08),
    _model("llama-3.3-70b-4bit", 70.6e9, 4.5, 80, 64, 8, 128, 0.07),
    _model("llama-3.3-70b-8bit", 70.6e9, 8.5, 80, 64, 8, 128, 0.02),
    _model("qwen3-235b-a22b-4bit", 235e9, 4.5, 94, 64, 4, 128, 0.04, active=22e9),
    _model("llama-3.1-405b-4bit", 405e9, 4.5, 126, 128, 8, 128, 0.02),
    _model("deepseek-v3-671b-4bit", 671e9, 4.5, 61, 128, 8, 64, 0.02, active=37e9),
    _model("kimi-k2-1t-4bit", 1.03e12, 4.6, 61, 64, 8, 64, 0.04, active=32e9),
)
CONTEXTS = (2048, 4096, 8192, 16384, 32768, 131072)
CONTEXT_WEIGHTS = (0.2, 0.3, 0.2, 0.15, 0.1, 0.05)


def _hardware(kind: MacKind, memory_gib: int) -> HardwareReport:
    memory = memory_gib * GIB
    return HardwareReport(chip=kind.chip, chip_family=kind.family, chip_tier=kind.tier, memory_bytes=memory,
                          gpu_working_set_bytes=memory * 3 // 4, gpu_cores=kind.gpu_cores,
                          memory_bandwidth_gb_s=kind.bandwidth_gb_s, os_name="macOS 26.2")


def _served(rng: random.Random, ceiling: int, config: PlacementConfig, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """A few of the models that fit this Mac at a short context, plus any the pod serves."""
    fitting = [m.spec.model_id for m in MODELS
               if estimate_job_memory(m.spec, 4096, config.memory).total_bytes <= ceiling]
    chosen = rng.sample(fitting, min(len(fitting), rng.randint(3, 6))) if fitting else []
    return frozenset(chosen) | frozenset(extra)


def _mac(rng: random.Random, node_id: str, kind: MacKind, memory_gib: int, config: PlacementConfig,
         dedicated: bool, pod_models: tuple[str, ...] = ()) -> MacCandidate:
    mode = LendingMode.DEDICATED if dedicated else LendingMode.IDLE
    hardware = _hardware(kind, memory_gib)
    probe = MacCandidate(NodeId(node_id), hardware, True, 0, 0, 1, frozenset(), mode=mode)
    ceiling = mac_ceiling_bytes(probe, config.memory)
    served = _served(rng, ceiling, config, pod_models)
    warm = frozenset(rng.sample(sorted(served), min(len(served), rng.choice((0, 0, 1, 1, 2)))))
    max_jobs = rng.choice((1, 2, 2, 4)) if ceiling >= 64 * GIB else rng.choice((1, 1, 2))
    running = rng.randrange(max_jobs + 1) if rng.random() < 0.3 else 0
    committed = min(ceiling, int(ceiling * rng.uniform(0.1, 0.6))) if running else 0
    measured = kind.bandwidth_gb_s * rng.uniform(0.85, 1.0) if rng.random() < 0.3 else None
    reputation = 1.0 if rng.random() < 0.8 else round(rng.uniform(0.6, 1.0), 3)
    price_base = {ChipTier.BASE: 200_000, ChipTier.PRO: 400_000, ChipTier.MAX: 700_000, ChipTier.ULTRA: 1_000_000}
    price = int(price_base[kind.tier] * rng.choice((0.8, 0.9, 1.0, 1.0, 1.1)))
    return MacCandidate(
        node_id=NodeId(node_id), hardware=hardware, online=rng.random() < 0.92, committed_memory_bytes=committed,
        running_jobs=running, max_concurrent_jobs=max_jobs, served_models=served, warm_models=warm, mode=mode,
        owner_active=(not dedicated) and rng.random() < (0.25 if kind.laptop else 0.1),
        reputation=reputation, measured_bandwidth_gb_s=measured, price_per_million_tokens=price)


def _pods(rng: random.Random, count: int, config: PlacementConfig) -> tuple[list[MacCandidate], list[PodCandidate]]:
    big = tuple(m.spec.model_id for m in MODELS if m.spec.weights_bytes > 100e9)
    macs: list[MacCandidate] = []
    pods: list[PodCandidate] = []
    for p in range(count):
        kind, memory = rng.choice(((STUDIO_M3_ULTRA, 512), (STUDIO_M3_ULTRA, 512), (STUDIO_M3_ULTRA, 256),
                                   (STUDIO_M4_MAX, 128)))
        size = rng.choice((2, 3, 4, 4))
        link = LinkKind.RDMA_TB5 if rng.random() < 0.7 else rng.choice((LinkKind.TCP_THUNDERBOLT, LinkKind.ETHERNET))
        pod_models = tuple(rng.sample(big, rng.randint(1, 3)))
        members = [_mac(rng, f"pod{p:05d}-m{i}", kind, memory, config, True, pod_models) for i in range(size)]
        macs += members
        ids = tuple(m.node_id for m in members)
        links = tuple(PodLink(a, b, link) for a, b in itertools.combinations(ids, 2))
        pods.append(PodCandidate(f"pod{p:05d}", ids, links))
    return macs, pods


def simulate_fleet(macs: int, pods: int, seed: int = 1, config: PlacementConfig = PlacementConfig()) -> FleetSnapshot:
    """`macs` Macs in all, of which the pods' members are a part."""
    rng = random.Random(seed)
    pod_macs, pod_list = _pods(rng, pods, config)
    assert len(pod_macs) <= macs, "more pod members than Macs"
    kinds = rng.choices(MAC_KINDS, weights=[k.share for k in MAC_KINDS], k=macs - len(pod_macs))
    singles = [_mac(rng, f"mac{i:06d}", kind, rng.choice(kind.memory_gib), config,
                    rng.random() < kind.dedicated_share) for i, kind in enumerate(kinds)]
    return FleetSnapshot(tuple(singles + pod_macs), tuple(pod_list))


def simulate_jobs(count: int, seed: int = 2) -> list[JobRequest]:
    return list(generate_jobs(count, seed))


def generate_jobs(count: int, seed: int = 2) -> Iterator[JobRequest]:
    """simulate_jobs one at a time, for runs too long to hold every job (the same jobs, in order)."""
    rng = random.Random(seed)
    kinds = rng.choices(MODELS, weights=[m.share for m in MODELS], k=count)
    for i, kind in enumerate(kinds):
        context = min(rng.choices(CONTEXTS, weights=CONTEXT_WEIGHTS)[0], kind.spec.max_context_tokens)
        roll = rng.random()
        speed = 0.0 if roll < 0.6 else (rng.uniform(5, 25) if roll < 0.9 else rng.uniform(30, 80))
        yield JobRequest(job_id=JobId(f"job-{seed}-{i:07d}"), model=kind.spec, context_tokens=context,
                         min_decode_tokens_per_s=round(speed, 1), active_weights_bytes=kind.active_weights_bytes,
                         prompt_tokens=context // 2)
