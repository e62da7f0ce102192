"""Sizes and speeds as macOS prints them ("48 GB", "80 Gb/s", "Up to 120 Gb/s")."""

from __future__ import annotations

import re

from node_agent.hardware.errors import HardwareParseError

# macOS prints binary sizes with decimal unit names: a "512 GB" Mac has
# hw.memsize = 512 * 2**30 bytes.
_BYTES_PER_UNIT = {"KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
_SIZE_PATTERN = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)\s*(KB|MB|GB|TB)", re.IGNORECASE)
_SPEED_PATTERN = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)\s*Gb/s", re.IGNORECASE)


def parse_memory_size(text: str) -> int:
    """ "48 GB" -> 51539607552 bytes."""
    match = _SIZE_PATTERN.fullmatch(text.strip())
    if match is None:
        raise HardwareParseError(f"not a memory size: {text[:80]!r}")
    amount, unit = match.groups()
    size_bytes = int(float(amount) * _BYTES_PER_UNIT[unit.upper()])
    if size_bytes <= 0:
        raise HardwareParseError(f"memory size must be positive: {text[:80]!r}")
    return size_bytes


def parse_link_speed_gbps(text: str) -> int:
    """ "80 Gb/s" -> 80; "Up to 40 Gb/s x1" -> 40 (the only figure older macOS prints)."""
    match = _SPEED_PATTERN.search(text)
    if match is None:
        raise HardwareParseError(f"not a link speed: {text[:80]!r}")
    return round(float(match.group(1)))
