"""Does a node's self-benchmark fit the chip it claims? Pure, so spoofing tests need no Mac.

A Mac cannot measure more than its memory system allows, and MLX's streaming
copy reaches well over half the rated bandwidth on every Apple chip. So a
measurement far below the claimed chip's rating means the claim is false (an
"M3 Ultra" that moves memory like an M4), and a decode rate that reads more
bytes per second than the measured bandwidth means the figures are invented.
"""

from __future__ import annotations

from contracts.benchmarks import BenchmarkResult
from contracts.hardware import ChipTier, HardwareReport

# Measured over rated below this is not the claimed chip. We expect honest Macs
# to sustain roughly 0.7 to 0.9 of their rating on a streaming copy (to be
# recalibrated from fleet data); an M4 Max posing as an M3 Ultra reaches at most 0.54.
BANDWIDTH_FRACTION_MIN = 0.55
# Weights this large do not fit any Apple chip's caches, so decoding must read them from memory.
CACHE_BYTES_MAX = 256 * 2**20
# Decoding reads weights at most this many times faster than the measured streaming bandwidth.
DECODE_OVER_BANDWIDTH_MAX = 1.5


def benchmark_flag(hardware: HardwareReport, result: BenchmarkResult) -> str | None:
    """Why the benchmark does not fit the claimed hardware, or None when it does."""
    rated = hardware.memory_bandwidth_gb_s
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
