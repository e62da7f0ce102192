"""Parse `system_profiler -json SPDisplaysDataType` for the GPU and its core count.

On Apple silicon the built-in GPU is one item whose `sppci_cores` holds the
GPU core count. No recording of this output was available; the format follows
Apple's documented keys and the fixtures for it are marked hand-written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from node_agent.hardware.errors import HardwareParseError
from node_agent.hardware.profiler_json import data_type_items, text_field

_GPU_CORES_MAX = 4096


@dataclass(frozen=True)
class Gpu:
    name: str  # "Apple M3 Ultra"
    cores: int | None  # None when the item has no sppci_cores (e.g. an Intel GPU)


def parse_displays_json(text: str) -> tuple[Gpu, ...]:
    """Every GPU listed under SPDisplaysDataType, in output order."""
    return tuple(
        Gpu(
            name=text_field(item, "sppci_model") or text_field(item, "_name"),
            cores=_parse_cores(item.get("sppci_cores")),
        )
        for item in data_type_items(text, "SPDisplaysDataType")
    )


def gpu_core_count(gpus: tuple[Gpu, ...]) -> int | None:
    """The core count of the first GPU that reports one (Apple silicon has exactly one)."""
    return next((gpu.cores for gpu in gpus if gpu.cores is not None), None)


def _parse_cores(value: object) -> int | None:
    # macOS writes the count as a string ("80"); accept a plain integer too.
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        cores = value
    elif isinstance(value, str) and re.fullmatch(r"[0-9]{1,6}", value.strip()):
        cores = int(value)
    else:
        raise HardwareParseError(f"sppci_cores is not a core count: {str(value)[:40]!r}")
    if not 0 < cores <= _GPU_CORES_MAX:
        raise HardwareParseError(f"implausible GPU core count {cores}")
    return cores
