"""The Apple silicon chip table: GPU cores, memory options and bandwidth per variant.

The rows come from `data/apple-silicon-chips.csv` (sources in `data/README.md`),
read once on first use. The coordinator and the node agent both use this module,
so it imports nothing from either of them, nor from the ledger.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from contracts.hardware import ChipTier

# llama-bench reports LLaMA-2 7B Q4_0 (the model behind the table's tg128 column)
# as 3.56 GiB. Decoding reads every weight once per token, and at 128 tokens the
# KV cache adds little, so this is the bytes read per generated token.
REFERENCE_MODEL_BYTES_PER_TOKEN = int(3.56 * 2**30)  # 3_822_520_893 bytes

_CSV_NAME = "apple-silicon-chips.csv"
_TIERS = {"": ChipTier.BASE, "pro": ChipTier.PRO, "max": ChipTier.MAX, "ultra": ChipTier.ULTRA}
# "Apple M4 Max", "M4 Max", "m4-max", "Apple M4 Max (Virtual)": a family number
# and an optional tier word, nothing else.
_NAME_PATTERN = re.compile(r"m([1-9][0-9]?)(?: (pro|max|ultra))?")


@dataclass(frozen=True)
class Chip:
    """One row of the chip table: a chip in one CPU/GPU core configuration."""

    chip: str  # "M3 Ultra"
    family: str  # "M3"
    tier: ChipTier
    variant: str  # "28-core CPU / 60-core GPU"
    gpu_cores: int
    memory_gb_options: tuple[int, ...]  # sourced sizes only; may be empty
    memory_gb_max: int | None
    bandwidth_gb_s: float  # Apple's marketed unified-memory bandwidth
    thunderbolt_version: int | None  # 3, 4 or 5
    llama7b_q4_tokens_per_s: float | None  # llama.cpp tg128, LLaMA-2 7B Q4_0
    cpu_cores: int | None
    cpu_performance_cores: int | None
    cpu_efficiency_cores: int | None

    @property
    def brand(self) -> str:
        """The name macOS reports in machdep.cpu.brand_string, e.g. "Apple M3 Ultra"."""
        return f"Apple {self.chip}"

    @property
    def known_memory_gb(self) -> tuple[int, ...]:
        """Memory sizes the table's sources confirm for this variant, ascending."""
        sizes = set(self.memory_gb_options)
        if self.memory_gb_max is not None:
            sizes.add(self.memory_gb_max)
        return tuple(sorted(sizes))

    def offers_memory(self, memory_gb: int) -> bool:
        return memory_gb in self.known_memory_gb


def normalise_chip_name(text: str) -> str | None:
    """The table's name for a chip: "Apple M4 Max (Virtual)" or "m4-max" -> "M4 Max".

    None when the text names no Apple M-series chip (an Intel brand string, say).
    """
    name = re.sub(r"\([^)]*\)", " ", text).lower().replace("-", " ").replace("_", " ")
    words = name.split()
    if words[:1] == ["apple"]:
        words = words[1:]
    match = _NAME_PATTERN.fullmatch(" ".join(words))
    if match is None:
        return None
    family, tier = match.groups()
    return f"M{family} {tier.capitalize()}" if tier else f"M{family}"


@functools.cache
def all_chips() -> tuple[Chip, ...]:
    """Every usable row of the table, in file order (read on first call, then cached)."""
    text = (
        resources.files("contracts")
        .joinpath("data")
        .joinpath(_CSV_NAME)
        .read_text(encoding="utf-8")
    )
    chips = tuple(
        _chip_from_row(row) for row in csv.DictReader(io.StringIO(text)) if _is_usable(row)
    )
    assert chips, f"{_CSV_NAME} has no usable rows"
    return chips


def chips_named(name: str) -> tuple[Chip, ...]:
    """All variants of the chip a brand string or name refers to ("Apple M4 Max" -> 2 rows)."""
    chip_name = normalise_chip_name(name)
    if chip_name is None:
        return ()
    return tuple(chip for chip in all_chips() if chip.chip == chip_name)


def lookup_chip(
    brand_string_or_name: str,
    gpu_cores: int | None = None,
    *,
    memory_gb: int | None = None,
    cpu_cores: int | None = None,
) -> Chip | None:
    """The table row for a chip, or None when the name is not an Apple M-series chip.

    Each known fact (GPU cores, memory size, CPU cores) narrows the binned variants,
    and is ignored when it matches none of them. Whatever remains ambiguous resolves
    to the conservative variant: lowest bandwidth, then fewest GPU cores.
    """
    candidates = chips_named(brand_string_or_name)
    if not candidates:
        return None
    if gpu_cores is not None:
        candidates = _narrow(candidates, lambda chip: chip.gpu_cores == gpu_cores)
    if memory_gb is not None:
        candidates = _narrow(candidates, lambda chip: chip.offers_memory(memory_gb))
    if cpu_cores is not None:
        candidates = _narrow(candidates, lambda chip: chip.cpu_cores == cpu_cores)
    return min(candidates, key=lambda chip: (chip.bandwidth_gb_s, chip.gpu_cores))


def bandwidth_bound_tokens_per_s(bandwidth_gb_s: float, bytes_per_token: int) -> float:
    """Decode speed if every token had to read bytes_per_token at full bandwidth."""
    assert bytes_per_token > 0
    return bandwidth_gb_s * 1e9 / bytes_per_token


def eta_for_chip(chip: Chip) -> float | None:
    """Measured ÷ bandwidth-bound tokens/s for LLaMA-2 7B Q4_0, or None when unmeasured.

    The M5 rows were measured with a newer llama.cpp build than the M1-M4 rows,
    so compare η within those two groups, not across them.
    """
    if chip.llama7b_q4_tokens_per_s is None or chip.bandwidth_gb_s <= 0:
        return None
    bound = bandwidth_bound_tokens_per_s(chip.bandwidth_gb_s, REFERENCE_MODEL_BYTES_PER_TOKEN)
    return chip.llama7b_q4_tokens_per_s / bound


def _narrow(candidates: tuple[Chip, ...], keep: Callable[[Chip], bool]) -> tuple[Chip, ...]:
    kept = tuple(chip for chip in candidates if keep(chip))
    return kept or candidates


def _is_usable(row: dict[str, str]) -> bool:
    # A row without GPU cores or bandwidth (M5 Ultra: every cell unsourced)
    # cannot place work, so it is left out rather than guessed.
    return bool(row["gpu_cores"].strip() and row["bandwidth_gbps"].strip())


def _chip_from_row(row: dict[str, str]) -> Chip:
    name = row["chip"].strip()
    family, _, tier_word = name.partition(" ")
    return Chip(
        chip=name,
        family=family,
        tier=_TIERS[tier_word.lower()],
        variant=row["variant"].strip(),
        gpu_cores=int(row["gpu_cores"]),
        memory_gb_options=_int_list(row["memory_gb_options"]),
        memory_gb_max=_optional_int(row["memory_gb_max"]),
        bandwidth_gb_s=float(row["bandwidth_gbps"]),
        thunderbolt_version=_leading_int(row["thunderbolt"]),
        llama7b_q4_tokens_per_s=_optional_float(row["llama7b_q4_tg128_tps"]),
        cpu_cores=_optional_int(row["cpu_total"]),
        cpu_performance_cores=_optional_int(row["cpu_p"]),
        cpu_efficiency_cores=_optional_int(row["cpu_e"]),
    )


def _optional_int(cell: str) -> int | None:
    return int(cell) if cell.strip() else None


def _int_list(cell: str) -> tuple[int, ...]:
    return tuple(int(item) for item in cell.split(";") if item.strip())


def _optional_float(cell: str) -> float | None:
    return float(cell) if cell.strip() else None


def _leading_int(cell: str) -> int | None:
    # Cells such as "4 (Mac mini); MacBook Air/Pro 13 not sourced" lead with the version.
    match = re.match(r"\s*(\d+)", cell)
    return int(match.group(1)) if match else None
