"""Does a node's self-benchmark fit the chip it claims? Pure, so spoofing tests need no Mac.

A Mac cannot measure more than its memory system allows, and MLX's streaming
copy reaches well over half the rated bandwidth on every Apple chip. So a
measurement far below the claimed chip's rating means the claim is false (an
"M3 Ultra" that moves memory like an M4), and a decode rate that reads more
bytes per second than the measured bandwidth means the figures are invented.
"""

from __future__ import annotations

from contracts.benchmarks import BenchmarkResult
from contracts.chips import lookup_chip
from contracts.hardware import ChipTier, HardwareReport

# Measured over rated below this is not the claimed chip. We expect honest Macs
# to sustain roughly 0.7 to 0.9 of their rating on a streaming copy (to be
# recalibrated from fleet data); an M4 Max posing as an M3 Ultra reaches at most 0.54.
BANDWIDTH_FRACTION_MIN = 0.55
# Weights this large do not fit any Apple chip's caches, so decoding must read them from memory.
CACHE_BYTES_MAX = 256 * 2**20
# Decoding reads weights at most this many times faster than the measured streaming bandwidth.
DECODE_OVER_BANDWIDTH_MAX = 1.5


def rated_bandwidth_gb_s(hardware: HardwareReport) -> float:
    """The claimed chip's rating from the chip table (never the node's own figure); for a
    host outside the table, what it claims (0.0: unknown)."""
    chip = lookup_chip(hardware.chip, hardware.gpu_cores or None,
                       memory_gb=hardware.memory_bytes >> 30 or None)
    return chip.bandwidth_gb_s if chip is not None else hardware.memory_bandwidth_gb_s


def _tier_problem(hardware: HardwareReport) -> str | None:
    if hardware.chip_tier is ChipTier.NOT_APPLE:
        return None
    chip = lookup_chip(hardware.chip)
    if chip is None:
        return (f"chip {hardware.chip[:64]!r} is not in the chip table, so its "
                f"{hardware.chip_tier.value} tier cannot be checked")
    if chip.tier is not hardware.chip_tier:
        return f"chip {chip.chip} is a {chip.tier.value} chip, not {hardware.chip_tier.value} as claimed"
    return None


def benchmark_flag(hardware: HardwareReport, result: BenchmarkResult) -> str | None:
    """Why the benchmark does not fit the claimed hardware, or None when it does."""
    tier_problem = _tier_problem(hardware)
    if tier_problem is not None:
        return tier_problem
    rated = rated_bandwidth_gb_s(hardware)
    if hardware.chip_tier is not ChipTier.NOT_APPLE and rated > 0:
        fraction = result.memory_bandwidth_gb_s / rated
        if fraction < BANDWIDTH_FRACTION_MIN:
            return (f"measured memory bandwidth {result.memory_bandwidth_gb_s:.0f} GB/s is "
                    f"{fraction:.0%} of the {rated:.0f} GB/s of the claimed {hardware.chip}; "
                    f"that chip reaches at least {BANDWIDTH_FRACTION_MIN:.0%}")
    if result.reference_weights_bytes > CACHE_BYTES_MAX:
        implied = result.decode_bound_gb_s
        if implied > DECODE_OVER_BANDWIDTH_MAX * result.memory_bandwidth_gb_s:
            return (f"decoding {result.reference_model} at {result.decode_tokens_per_s:.1f} tok/s "
                    f"reads {implied:.0f} GB/s, more than the measured "
                    f"{result.memory_bandwidth_gb_s:.0f} GB/s allows")
    return None
