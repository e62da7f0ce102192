"""The chip table (contracts/chips.py over contracts/data/apple-silicon-chips.csv)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from contracts.chips import (
    REFERENCE_MODEL_BYTES_PER_TOKEN,
    Chip,
    all_chips,
    bandwidth_bound_tokens_per_s,
    chips_named,
    eta_for_chip,
    lookup_chip,
    normalise_chip_name,
)
from contracts.hardware import ChipTier


def _chip(name: str, gpu_cores: int) -> Chip:
    chip = lookup_chip(name, gpu_cores)
    assert chip is not None and chip.gpu_cores == gpu_cores
    return chip


def test_table_loads_every_row_but_the_unsourced_m5_ultra() -> None:
    chips = all_chips()
    assert len(chips) == 36
    assert all_chips() is chips  # cached
    assert not chips_named("M5 Ultra")
    assert {chip.family for chip in chips} == {"M1", "M2", "M3", "M4", "M5"}


def test_row_fields() -> None:
    chip = _chip("M3 Ultra", 80)
    assert (chip.chip, chip.family, chip.tier, chip.variant) == (
        "M3 Ultra",
        "M3",
        ChipTier.ULTRA,
        "32-core CPU / 80-core GPU",
    )
    assert (chip.bandwidth_gb_s, chip.thunderbolt_version, chip.llama7b_q4_tokens_per_s) == (
        819.0,
        5,
        92.14,
    )
    assert (chip.memory_gb_options, chip.memory_gb_max, chip.known_memory_gb) == ((), 512, (512,))
    assert (chip.cpu_cores, chip.cpu_performance_cores, chip.cpu_efficiency_cores) == (32, 24, 8)
    assert chip.brand == "Apple M3 Ultra"


def test_blank_cells_are_none() -> None:
    m2_max = _chip("M2 Max", 38)
    assert (m2_max.cpu_performance_cores, m2_max.cpu_efficiency_cores, m2_max.cpu_cores) == (
        None,
        None,
        12,
    )
    m4_8 = _chip("M4", 8)
    assert (m4_8.llama7b_q4_tokens_per_s, m4_8.thunderbolt_version) == (None, None)
    # "4 (Mac mini); MacBook Air/Pro 13 not sourced" -> 4
    assert _chip("M2", 10).thunderbolt_version == 4


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Apple M3 Ultra", "M3 Ultra"),
        ("M4 Max", "M4 Max"),
        ("apple m4 max (Virtual)", "M4 Max"),
        ("m4-pro", "M4 Pro"),
        ("  M4  ", "M4"),
        ("Intel(R) Core(TM) i9-9980HK CPU @ 2.40GHz", None),
        ("Apple processor", None),
        ("M4 Turbo", None),
        ("", None),
    ],
)
def test_normalise_chip_name(text: str, name: str | None) -> None:
    assert normalise_chip_name(text) == name


def test_binned_m4_max() -> None:
    assert lookup_chip("Apple M4 Max", 40).bandwidth_gb_s == 546.0  # type: ignore[union-attr]
    assert lookup_chip("Apple M4 Max", 32).bandwidth_gb_s == 410.0  # type: ignore[union-attr]
    unknown = lookup_chip("Apple M4 Max")
    assert unknown is not None and (unknown.gpu_cores, unknown.bandwidth_gb_s) == (32, 410.0)


def test_unknown_gpu_count_is_conservative_across_families() -> None:
    for name in ("M1 Max", "M3 Max", "M5 Pro", "M5 Max", "M1 Ultra"):
        variants = chips_named(name)
        chosen = lookup_chip(name)
        assert chosen is not None
        assert chosen.bandwidth_gb_s == min(chip.bandwidth_gb_s for chip in variants)
    assert lookup_chip("M5 Max").bandwidth_gb_s == 460.0  # type: ignore[union-attr]
    assert lookup_chip("M3 Max").bandwidth_gb_s == 300.0  # type: ignore[union-attr]


def test_memory_and_cpu_narrow_the_variant() -> None:
    assert lookup_chip("M4 Max", memory_gb=128).gpu_cores == 40  # type: ignore[union-attr]
    assert lookup_chip("M4 Max", memory_gb=36).gpu_cores == 32  # type: ignore[union-attr]
    assert lookup_chip("M4 Pro", cpu_cores=14).gpu_cores == 20  # type: ignore[union-attr]
    # Facts that match no variant are ignored rather than emptying the choice.
    assert lookup_chip("M4 Max", 33, memory_gb=4).gpu_cores == 32  # type: ignore[union-attr]


def test_lookup_of_non_apple_chips_is_none() -> None:
    assert lookup_chip("Intel(R) Xeon(R) Processor") is None
    assert lookup_chip("M9 Max") is None
    assert lookup_chip("M5 Ultra") is None


def test_eta() -> None:
    assert REFERENCE_MODEL_BYTES_PER_TOKEN == 3_822_520_893
    m4_max = _chip("M4 Max", 40)
    bound = bandwidth_bound_tokens_per_s(546.0, REFERENCE_MODEL_BYTES_PER_TOKEN)
    assert bound == pytest.approx(142.84, abs=0.01)
    assert eta_for_chip(m4_max) == pytest.approx(83.06 / bound)
    assert eta_for_chip(_chip("M4", 8)) is None


def test_eta_is_plausible_wherever_measured() -> None:
    etas = [eta for eta in map(eta_for_chip, all_chips()) if eta is not None]
    assert len(etas) == 31
    assert all(0.3 < eta < 0.9 for eta in etas)


def test_chips_imports_no_service_package() -> None:
    code = (
        "import sys, contracts.chips\n"
        "services = {'coordinator', 'node_agent', 'ledger', 'mlx'}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in services)\n"
        "assert not bad, bad\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2]
    )
