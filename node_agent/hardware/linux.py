"""Hardware of a Linux host, which runs MLX on the CPU (mlx[cpu]).

Memory comes from /proc/meminfo and the CPU name from /proc/cpuinfo; both
parsers are pure so other kernels' outputs can be tested without them.
"""

from __future__ import annotations

import re

from node_agent.hardware.errors import HardwareParseError

_MEM_TOTAL_PATTERN = re.compile(r"^MemTotal:\s*([0-9]{1,15})\s*kB\s*$", re.MULTILINE)
# x86 kernels say "model name"; arm64 kernels often give only "CPU implementer" etc.
_MODEL_NAME_PATTERN = re.compile(r"^(?:model name|Model|Hardware)\s*:\s*(.+?)\s*$", re.MULTILINE)


def parse_meminfo_total_bytes(text: str) -> int:
    """MemTotal from /proc/meminfo, in bytes (the kernel's "kB" means KiB)."""
    match = _MEM_TOTAL_PATTERN.search(text)
    if match is None or int(match.group(1)) == 0:
        raise HardwareParseError("no positive MemTotal in /proc/meminfo")
    return int(match.group(1)) * 1024


def parse_cpu_model_name(text: str) -> str | None:
    """The first CPU model name in /proc/cpuinfo, or None when the kernel gives none."""
    match = _MODEL_NAME_PATTERN.search(text)
    return match.group(1) if match else None
