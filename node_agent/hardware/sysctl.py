"""Parse `sysctl -n machdep.cpu.brand_string hw.memsize hw.model`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from node_agent.hardware.errors import HardwareParseError

SYSCTL_ARGV = ("sysctl", "-n", "machdep.cpu.brand_string", "hw.memsize", "hw.model")


@dataclass(frozen=True)
class SysctlValues:
    brand_string: str  # "Apple M3 Ultra"
    memory_bytes: int  # hw.memsize, the whole unified memory
    model_identifier: str  # hw.model, e.g. "Mac15,14"


def parse_sysctl(text: str) -> SysctlValues:
    """`sysctl -n` prints one value per line, in the order the names were given."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 3:
        raise HardwareParseError(f"expected 3 sysctl values, got {len(lines)}")
    brand_string, memsize, model_identifier = lines
    if not re.fullmatch(r"[0-9]{1,20}", memsize) or int(memsize) <= 0:
        raise HardwareParseError(f"hw.memsize is not a positive integer: {memsize[:40]!r}")
    return SysctlValues(brand_string, int(memsize), model_identifier)
