"""Predicted speed of a job on a Mac or a pod.

Decode is bound by memory bandwidth: tokens/s = η x bandwidth / (active weight bytes
+ KV bytes read per token). We read the KV cache at the full context length, which
is conservative: decode reads only the tokens so far. Prefill is compute-bound and
only reported, never filtered on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from contracts.hardware import LinkKind
from coordinator.placement.candidates import JobRequest, MacCandidate
from coordinator.placement.config import SpeedConfig
from coordinator.placement.memory import kv_cache_bytes_per_token


@dataclass(frozen=True)
class SpeedProfile:
    """Everything decode speed depends on besides the job; Macs with equal profiles are interchangeable."""

    bandwidth_step: int  # effective bandwidth (η x bandwidth) = 2 ** (step / grid), bytes/s
    parallel_speedup: float = 1.0  # tensor parallel's published speedup; 1 for a Mac or a pipeline
    hops: int = 0  # pipeline hops a token crosses
    hop_latency_s: float = 0.0


def effective_bandwidth_step(mac: MacCandidate, config: SpeedConfig) -> int:
    """η x bandwidth in bytes/s, snapped down to the config's grid (an integer step)."""
    bandwidth_gb_s = mac.measured_bandwidth_gb_s or mac.hardware.memory_bandwidth_gb_s or config.fallback_bandwidth_gb_s
    efficiency = mac.measured_decode_efficiency or config.decode_efficiency
    return math.floor(math.log2(efficiency * bandwidth_gb_s * 1e9) * config.bandwidth_grid_per_octave)


def batch_share(batch_decode_tokens_per_s: tuple[tuple[int, float], ...], jobs: int, config: SpeedConfig) -> float:
    """What fraction of its alone speed one job gets when `jobs` decode together on a Mac.

    From the Mac's measured tokens/s in all at each batch size (linear between sizes, flat past
    the largest: never more than measured), or the config's conservative guess when unmeasured.
    Never above 1: a batch never makes one job faster."""
    assert jobs >= 1
    if jobs == 1:
        return 1.0
    points = batch_decode_tokens_per_s
    if not points or points[0][0] != 1:
        share = (1.0 + config.unmeasured_batch_gain * (jobs - 1)) / jobs
        return share if share < 1.0 else 1.0
    alone = points[0][1]
    total = points[-1][1]  # past the largest measured size
    for (b0, a0), (b1, a1) in zip(points, points[1:]):
        if jobs <= b1:
            total = a0 + (a1 - a0) * (jobs - b0) / (b1 - b0)
            break
    share = total / (jobs * alone)
    return share if share < 1.0 else 1.0


def loaded_bandwidth_step(mac: MacCandidate, running_jobs: int, config: SpeedConfig) -> int:
    """The bandwidth step a new job on this Mac decodes at, with `running_jobs` already in its batch:
    η x bandwidth x the job's batch share, snapped down to the grid as effective_bandwidth_step."""
    base = effective_bandwidth_step(mac, config)
    if running_jobs <= 0:
        return base
    share = batch_share(mac.batch_decode_tokens_per_s, running_jobs + 1, config)
    return base + math.floor(math.log2(share) * config.bandwidth_grid_per_octave)


def step_bandwidth_bytes_per_s(step: int, config: SpeedConfig) -> float:
    return 2.0 ** (step / config.bandwidth_grid_per_octave)


def bytes_read_per_token(job: JobRequest) -> int:
    return job.weights_read_per_token_bytes + kv_cache_bytes_per_token(job.model) * job.context_tokens


def decode_tokens_per_s(profile: SpeedProfile, bytes_per_token: int, config: SpeedConfig) -> float:
    return decode_from_bandwidth(step_bandwidth_bytes_per_s(profile.bandwidth_step, config), profile.parallel_speedup,
                                 profile.hops, profile.hop_latency_s, bytes_per_token)


def decode_from_bandwidth(bandwidth_bytes_per_s: float, speedup: float, hops: int, hop_latency_s: float,
                          bytes_per_token: int) -> float:
    """Every speed in the planner comes from here, so the index and the exhaustive search agree exactly."""
    bandwidth = bandwidth_bytes_per_s * speedup
    if hops == 0:
        return bandwidth / bytes_per_token  # the index inlines this for single Macs (speedup 1.0)
    return 1.0 / (bytes_per_token / bandwidth + hops * hop_latency_s)


def tensor_speedup(members: int, config: SpeedConfig) -> float:
    """Piecewise-linear through the published points, extended along the last segment."""
    points = config.tensor_speedup
    for (n0, s0), (n1, s1) in zip(points, points[1:]):
        if members <= n1:
            return s0 + (s1 - s0) * (members - n0) / (n1 - n0)
    if len(points) == 1:
        return points[0][1]
    (n0, s0), (n1, s1) = points[-2], points[-1]
    return s1 + (s1 - s0) * (members - n1) / (n1 - n0)


def link_latency_s(kind: LinkKind, config: SpeedConfig) -> float:
    return dict(config.link_latency_s)[kind]


def prefill_tokens_per_s(job: JobRequest, gpu_cores: int, decode: float, speedup: float,
                         config: SpeedConfig) -> float:
    """Compute-bound: efficiency x cores x FLOP/s per core / (2 FLOPs x active parameters)."""
    if gpu_cores <= 0:
        return decode * config.prefill_to_decode_ratio
    active_fraction = job.weights_read_per_token_bytes / job.model.weights_bytes
    active_parameters = max(job.model.parameter_count * active_fraction, 1.0)
    flops = config.prefill_efficiency * gpu_cores * config.gpu_flops_per_core * speedup
    return flops / (2.0 * active_parameters)


def time_to_first_token_s(job: JobRequest, prefill: float, decode: float, load_bytes: int,
                          config: SpeedConfig) -> float:
    """Load the weights not yet in memory (0 bytes when warm), process the prompt, then one decode step."""
    prompt = job.prompt_tokens if job.prompt_tokens is not None else job.context_tokens
    return load_bytes / config.cold_load_bytes_per_s + prompt / prefill + 1.0 / decode
