"""Where the agent learns whether the owner is around: the real host, or a file for tests.

An activity source returns a HostActivity; the monitor polls it. On macOS it
runs ioreg (HIDIdleTime) and pmset (power source, thermal limit). The file
source reads JSON like {"idle_seconds": 900, "on_ac_power": true,
"cpu_speed_limit_percent": null} so tests can play an owner who comes back.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from node_agent.hardware.discover import HostActivity, read_host_activity
from node_agent.hardware.errors import HardwareError
from node_agent.hardware.runner import Runner, subprocess_runner

log = logging.getLogger(__name__)

ActivitySource = Callable[[], HostActivity]
UNKNOWN = HostActivity(idle_seconds=None, on_ac_power=None, cpu_speed_limit_percent=None)
# A host we cannot read is treated as busy: lending stops rather than get in the owner's way.
UNREADABLE = HostActivity(idle_seconds=0.0, on_ac_power=None, cpu_speed_limit_percent=None)
ACTIVITY_FILE_BYTES_MAX = 4096


def host_activity_source(run: Runner = subprocess_runner, system: str | None = None) -> ActivitySource:
    def read() -> HostActivity:
        try:
            return read_host_activity(run, system=system)
        except HardwareError as error:
            log.warning("cannot read idle time, power or heat (%s); not taking work", error)
            return UNREADABLE
    return read


def file_activity_source(path: Path) -> ActivitySource:
    """Activity from a JSON file; a missing file means nobody is around (idle forever)."""
    def read() -> HostActivity:
        try:
            text = path.read_text(encoding="utf-8")[:ACTIVITY_FILE_BYTES_MAX]
        except FileNotFoundError:
            return UNKNOWN
        try:
            data = json.loads(text)
            return HostActivity(idle_seconds=_number(data.get("idle_seconds")),
                                on_ac_power=data.get("on_ac_power"),
                                cpu_speed_limit_percent=data.get("cpu_speed_limit_percent"))
        except (ValueError, AttributeError) as error:
            log.warning("activity file %s unreadable (%s); not taking work", path, error)
            return UNREADABLE
    return read


def _number(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"idle_seconds must be a number, not {value!r}")
    return float(value)
