"""A benchmark that does not fit the claimed chip is flagged: spoofed hardware is caught."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from contracts.benchmarks import BenchmarkResult
from contracts.chips import all_chips
from coordinator.nodes.benchmark_check import BANDWIDTH_FRACTION_MIN, benchmark_flag
from node_agent.hardware.profiles import simulated_profile

ULTRA = simulated_profile("m3-ultra-512")


def _bench(bandwidth: float, decode: float = 300.0, weights: int = 12_000_000) -> BenchmarkResult:
    return BenchmarkResult(memory_bandwidth_gb_s=bandwidth, decode_tokens_per_s=decode,
                           prefill_tokens_per_s=3000.0, reference_model="tiny",
                           reference_weights_bytes=weights, measured_at_ms=1, run_time_ms=1000)


def test_an_ultra_claim_with_m4_level_bandwidth_is_flagged() -> None:
    flag = benchmark_flag(ULTRA, _bench(110.0))  # an M4 (120 GB/s rated) measures about this
    assert flag is not None and "819 GB/s" in flag and "M3 Ultra" in flag


def test_an_m4_max_posing_as_an_ultra_is_flagged() -> None:
    assert benchmark_flag(ULTRA, _bench(0.8 * 546)) is not None


def test_an_honest_ultra_passes() -> None:
    assert benchmark_flag(ULTRA, _bench(0.75 * 819)) is None


def test_hosts_without_a_rated_bandwidth_are_not_judged_on_it() -> None:
    linux = dataclasses.replace(ULTRA, chip="Intel Xeon", chip_family="", memory_bandwidth_gb_s=0.0,
                                chip_tier=ULTRA.chip_tier.__class__("not_apple"))
    assert benchmark_flag(linux, _bench(5.0)) is None


def test_decode_faster_than_the_measured_bandwidth_allows_is_invented() -> None:
    big = 4 * 2**30  # a 4 GiB reference model cannot hide in a cache
    flag = benchmark_flag(ULTRA, _bench(700.0, decode=1000.0, weights=big))
    assert flag is not None and "reads" in flag
    assert benchmark_flag(ULTRA, _bench(700.0, decode=100.0, weights=big)) is None


@given(st.sampled_from([c for c in all_chips() if c.bandwidth_gb_s > 0]), st.floats(0.01, 2.0))
def test_flagged_exactly_below_the_fraction_of_the_rated_bandwidth(chip, fraction: float) -> None:  # type: ignore[no-untyped-def]
    # The variant is named by its GPU cores: the rating comes from the chip table, not the claim.
    hardware = dataclasses.replace(ULTRA, chip=chip.brand, chip_family=chip.family, gpu_cores=chip.gpu_cores,
                                   chip_tier=chip.tier, memory_bandwidth_gb_s=chip.bandwidth_gb_s)
    flagged = benchmark_flag(hardware, _bench(fraction * chip.bandwidth_gb_s)) is not None
    assert flagged == (fraction * chip.bandwidth_gb_s / chip.bandwidth_gb_s < BANDWIDTH_FRACTION_MIN)
