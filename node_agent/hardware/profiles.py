"""Simulated hardware for the node agent's --profile flag.

A profile is named `<chip-slug>-<memory GB>`, e.g. "m3-ultra-512" or "m4-16".
The memory size must be one the chip table confirms for that chip; when
several variants offer it, the conservative one (lowest bandwidth, then fewest
GPU cores) is used, as for a real Mac whose GPU core count is unknown.
"""

from __future__ import annotations

import re

from contracts.chips import Chip, all_chips, chips_named
from contracts.hardware import HardwareReport
from node_agent.hardware.errors import UnknownProfileError

PROFILE_EXAMPLES = (
    "m3-ultra-512",
    "m4-max-128",
    "m4-pro-64",
    "m4-16",
    "m2-ultra-192",
    "m5-max-128",
)
_PROFILE_PATTERN = re.compile(r"(m[1-9][0-9]?(?:-(?:pro|max|ultra))?)-([0-9]{1,5})")
# Metal's default recommended working set is about 75% of unified memory.
_WORKING_SET_FRACTION = 0.75


def simulated_profile(name: str) -> HardwareReport:
    """The HardwareReport a Mac of this profile would send, marked simulated."""
    match = _PROFILE_PATTERN.fullmatch(name.strip().lower())
    if match is None:
        raise UnknownProfileError(
            f"profile {name!r} is not <chip>-<memory GB>; try one of {_examples()}"
        )
    slug, memory_text = match.groups()
    variants = chips_named(slug)
    if not variants:
        raise UnknownProfileError(f"no chip {slug!r} in the chip table; try one of {_examples()}")
    memory_gb = int(memory_text)
    fitting = [chip for chip in variants if chip.offers_memory(memory_gb)]
    if not fitting:
        sizes = sorted({size for chip in variants for size in chip.known_memory_gb})
        raise UnknownProfileError(
            f"the chip table has no {variants[0].chip} with {memory_gb} GB "
            f"(known sizes: {', '.join(map(str, sizes)) or 'none'}); try one of {_examples()}"
        )
    chip = min(fitting, key=lambda chip: (chip.bandwidth_gb_s, chip.gpu_cores))
    return _report(chip, memory_gb)


def valid_profile_names() -> tuple[str, ...]:
    """Every name simulated_profile accepts, in chip-table order."""
    names: dict[str, None] = {}
    for chip in all_chips():
        for memory_gb in chip.known_memory_gb:
            names[f"{chip.chip.lower().replace(' ', '-')}-{memory_gb}"] = None
    return tuple(names)


def _report(chip: Chip, memory_gb: int) -> HardwareReport:
    memory_bytes = memory_gb * 2**30
    return HardwareReport(
        chip=chip.brand,
        chip_family=chip.family,
        chip_tier=chip.tier,
        memory_bytes=memory_bytes,
        gpu_working_set_bytes=int(memory_bytes * _WORKING_SET_FRACTION),
        gpu_cores=chip.gpu_cores,
        memory_bandwidth_gb_s=chip.bandwidth_gb_s,
        os_name="macOS (simulated)",
        simulated=True,
    )


def _examples() -> str:
    return ", ".join(PROFILE_EXAMPLES)
