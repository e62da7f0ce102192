"""Every constant the planner uses, in one frozen value so tests and calibration can inject them.

The memory constants are a first guess checked against mlx-lm's published peaks
(Qwen3-4B on an M4 Max: q4 3.35 GB and bf16 9.0 GB at 2048+128 tokens); they will
be calibrated against mx.get_peak_memory() on real nodes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from contracts.hardware import LinkKind

GIB = 1 << 30


@dataclass(frozen=True)
class MemoryConfig:
    # Runtime, activations and the prefill logits: Qwen3-4B peaks 0.6-0.8 GB above weights+KV.
    overhead_fixed_bytes: int = GIB
    overhead_fraction_of_weights: float = 0.05  # grows with the model: larger hidden states
    # An idle-lending Mac keeps max(min bytes, fraction of RAM) for its owner's apps.
    owner_reserve_min_bytes: int = 8 * GIB
    owner_reserve_fraction: float = 0.25
    # Prefill runs in chunks (mlx-lm's prefill_step_size); each chunk holds attention scores
    # over the whole context and hidden activations (bench/memory_calibration.py fits these).
    prefill_chunk_tokens: int = 2048
    activation_hidden_multiple: int = 16
    # Metal's fused attention never holds the score matrix; MLX's CPU build does.
    attention_scores_materialized: bool = False

    def __post_init__(self) -> None:
        assert self.overhead_fixed_bytes > 0, "every job needs some runtime memory"
        assert self.prefill_chunk_tokens > 0 and self.activation_hidden_multiple >= 0
        assert 0.0 <= self.overhead_fraction_of_weights < 1.0
        assert self.owner_reserve_min_bytes >= 0 and 0.0 <= self.owner_reserve_fraction < 1.0


@dataclass(frozen=True)
class SpeedConfig:
    # η: achieved fraction of the bandwidth bound; 0.35-0.8 measured on M4 Max by model class.
    decode_efficiency: float = 0.5
    # Used when a Mac reports no bandwidth (0.0, e.g. a Linux CPU host) and has no measurement.
    fallback_bandwidth_gb_s: float = 50.0
    # Bandwidth is snapped down to this grid (1/16 octave, under 4.4%), well inside η's uncertainty;
    # Macs on one grid step are interchangeable for the speed filter, which the index relies on.
    bandwidth_grid_per_octave: int = 16
    # Published tensor-parallel speedups (exo: 1.8x on 2, 3.2x on 4); others interpolate.
    tensor_speedup: tuple[tuple[int, float], ...] = ((1, 1.0), (2, 1.8), (4, 3.2))
    # Per-hop latency a pipeline pays once per token (RDMA under 50 us, TCP about 300 us).
    link_latency_s: tuple[tuple[LinkKind, float], ...] = (
        (LinkKind.RDMA_TB5, 50e-6), (LinkKind.TCP_THUNDERBOLT, 300e-6), (LinkKind.ETHERNET, 500e-6))
    # Prefill is compute-bound: efficiency x cores x FLOP/s per core / (2 x active parameters).
    # 0.8 x 40 cores x 0.4e12 / 8.04e9 gives 1,590 tok/s for Qwen3-4B bf16 (measured 1,781).
    prefill_efficiency: float = 0.8
    gpu_flops_per_core: float = 0.4e12
    prefill_to_decode_ratio: float = 10.0  # when GPU cores are unknown: a conservative multiple
    cold_load_bytes_per_s: float = 3e9  # reading weights from SSD when the model is not warm
    # Jobs on one Mac decode in one batch: a busy Mac is slower per job and faster in total. Until a
    # node measures it (its benchmark's batch_decode_tokens_per_s), its tokens/s in all at a batch of
    # b jobs is taken as alone x (1 + gain x (b - 1)): 0.1 is below every published curve (Darkbloom's
    # M4 Max: 0.5 at 2, 0.18 at 4, 0.22 at 8; mlx-lm's granite: 0.16 at 32), so a guess never flatters.
    unmeasured_batch_gain: float = 0.1

    def __post_init__(self) -> None:
        assert 0.0 < self.decode_efficiency <= 1.0
        assert self.fallback_bandwidth_gb_s > 0 and self.bandwidth_grid_per_octave >= 1
        points = [members for members, _ in self.tensor_speedup]
        assert points == sorted(points) and points[0] == 1 and len(set(points)) == len(points)
        assert {kind for kind, _ in self.link_latency_s} == set(LinkKind), "a latency per link kind"
        assert self.prefill_efficiency > 0 and self.gpu_flops_per_core > 0
        assert self.prefill_to_decode_ratio > 0 and self.cold_load_bytes_per_s > 0
        assert self.unmeasured_batch_gain >= 0.0


@dataclass(frozen=True)
class ScoreWeights:
    """Relative weights of the named scores; each score is already in 0..1."""

    best_fit: float = 0.35  # tight fits keep large Macs free for large jobs
    speed: float = 0.25
    warm_model: float = 0.2
    reputation: float = 0.1
    price: float = 0.1

    def __post_init__(self) -> None:
        values = (self.best_fit, self.speed, self.warm_model, self.reputation, self.price)
        assert all(v >= 0 for v in values) and sum(values) > 0, "weights are non-negative, not all zero"

    @functools.cached_property
    def normalised(self) -> tuple[float, float, float, float, float]:
        """The weights scaled to sum to 1, in field order; computed once (decisions read it often)."""
        values = (self.best_fit, self.speed, self.warm_model, self.reputation, self.price)
        total = sum(values)
        return tuple(v / total for v in values)  # type: ignore[return-value]


@dataclass(frozen=True)
class PlacementConfig:
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    speed: SpeedConfig = field(default_factory=SpeedConfig)
    weights: ScoreWeights = field(default_factory=ScoreWeights)
    # Best fit falls from 1 to 0 as free memory grows from the job's need to 2**span times it.
    best_fit_span_octaves: float = 10.0
    # Speed scores 1 once decode reaches max(job's minimum, this); faster earns nothing more.
    comfortable_decode_tokens_per_s: float = 20.0
    price_reference_per_million_tokens: int = 1_000_000  # the price that scores 0.5
    # Pods are scarce and the only home of the largest models: a job some single Mac could
    # take (when free) waits for one instead of occupying a pod.
    reserve_pods_for_jobs_no_mac_can_take: bool = True
    # Search limits: the index scores at most this many candidates per group and per decision.
    scan_per_group_max: int = 256
    scored_per_decision_max: int = 2048
    pods_checked_for_permanence_max: int = 16
    top_candidates_explained: int = 3

    def __post_init__(self) -> None:
        assert self.best_fit_span_octaves > 0
        assert self.comfortable_decode_tokens_per_s > 0
        assert self.price_reference_per_million_tokens > 0
        assert self.scan_per_group_max >= 1 and self.scored_per_decision_max >= 1
        assert self.pods_checked_for_permanence_max >= 1 and self.top_candidates_explained >= 1
