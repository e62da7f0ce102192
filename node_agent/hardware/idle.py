"""Parse the user idle time from `ioreg -c IOHIDSystem`.

The IOHIDSystem entry carries `"HIDIdleTime" = <nanoseconds since the last
keyboard, mouse or trackpad event>`; the node lends its Mac only after a while idle.
"""

from __future__ import annotations

import re

from node_agent.hardware.errors import HardwareParseError

IOREG_HID_ARGV = ("ioreg", "-c", "IOHIDSystem")
_IDLE_PATTERN = re.compile(r'"HIDIdleTime"\s*=\s*([0-9]{1,20})')
_NANOSECONDS_PER_SECOND = 1_000_000_000


def parse_hid_idle_seconds(text: str) -> float:
    """Seconds since the last user input, from the first HIDIdleTime in the output."""
    match = _IDLE_PATTERN.search(text)
    if match is None:
        raise HardwareParseError("no HIDIdleTime in ioreg output")
    return int(match.group(1)) / _NANOSECONDS_PER_SECOND
