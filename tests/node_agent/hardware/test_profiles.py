"""simulated_profile: `<chip-slug>-<memory GB>` validated against the chip table."""

from __future__ import annotations

import pytest

from contracts.chips import lookup_chip
from contracts.hardware import ChipTier
from node_agent.hardware import (
    PROFILE_EXAMPLES,
    UnknownProfileError,
    simulated_profile,
    valid_profile_names,
)

GIB = 2**30


@pytest.mark.parametrize(
    ("name", "chip", "tier", "memory_gb", "gpu_cores", "bandwidth"),
    [
        ("m3-ultra-512", "Apple M3 Ultra", ChipTier.ULTRA, 512, 60, 819.0),
        ("m4-max-128", "Apple M4 Max", ChipTier.MAX, 128, 40, 546.0),
        ("m4-max-36", "Apple M4 Max", ChipTier.MAX, 36, 32, 410.0),
        ("m4-pro-64", "Apple M4 Pro", ChipTier.PRO, 64, 16, 273.0),
        ("m4-16", "Apple M4", ChipTier.BASE, 16, 8, 120.0),
        ("m2-ultra-192", "Apple M2 Ultra", ChipTier.ULTRA, 192, 60, 800.0),
        ("m5-max-128", "Apple M5 Max", ChipTier.MAX, 128, 40, 614.0),
        ("M4-Pro-24", "Apple M4 Pro", ChipTier.PRO, 24, 16, 273.0),
    ],
)
def test_profiles(
    name: str, chip: str, tier: ChipTier, memory_gb: int, gpu_cores: int, bandwidth: float
) -> None:
    report = simulated_profile(name)
    assert (report.chip, report.chip_tier, report.gpu_cores) == (chip, tier, gpu_cores)
    assert report.memory_bytes == memory_gb * GIB
    assert report.gpu_working_set_bytes == memory_gb * GIB * 3 // 4
    assert report.memory_bandwidth_gb_s == bandwidth
    assert report.simulated and report.chip_family == chip.split()[1]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("m3-ultra", "<chip>-<memory GB>"),
        ("ultra-512", "<chip>-<memory GB>"),
        ("m3-ultra-512gb", "<chip>-<memory GB>"),
        ("m9-max-64", "no chip 'm9-max'"),
        ("m3-ultra-64", "known sizes: 96, 512"),
        ("m4-max-96", "known sizes: 36, 48, 64, 128"),
        ("", "<chip>-<memory GB>"),
    ],
)
def test_bad_profiles_list_valid_examples(name: str, message: str) -> None:
    with pytest.raises(ValueError, match="m3-ultra-512") as caught:
        simulated_profile(name)
    assert isinstance(caught.value, UnknownProfileError)
    assert message in str(caught.value)


def test_every_example_and_every_listed_name_is_valid() -> None:
    names = valid_profile_names()
    assert set(PROFILE_EXAMPLES) <= set(names)
    for name in names:
        report = simulated_profile(name)
        assert report.simulated and report.memory_bandwidth_gb_s > 0


def test_profile_matches_a_lookup_by_memory() -> None:
    report = simulated_profile("m4-max-48")
    chip = lookup_chip("M4 Max", memory_gb=48)
    assert chip is not None and report.gpu_cores == chip.gpu_cores == 40
