"""Parse `pmset -g batt` (power source) and `pmset -g therm` (thermal throttling).

`pmset -g batt` starts "Now drawing from 'AC Power'" (or 'Battery Power', 'UPS
Power'); laptops add a line per battery with its charge, e.g. "85%; discharging".
`pmset -g therm` prints "CPU_Speed_Limit = <percent>" once macOS has throttled,
and only "Note: No ... has been recorded" lines before that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from node_agent.hardware.errors import HardwareParseError

PMSET_BATT_ARGV = ("pmset", "-g", "batt")
PMSET_THERM_ARGV = ("pmset", "-g", "therm")
_SOURCE_PATTERN = re.compile(r"Now drawing from '([^']{1,64})'")
_CHARGE_PATTERN = re.compile(r"(?<![0-9])([0-9]{1,3})%;")
_SPEED_LIMIT_PATTERN = re.compile(r"CPU_Speed_Limit\s*=\s*([0-9]{1,3})(?![0-9])")


@dataclass(frozen=True)
class PowerStatus:
    source: str  # "AC Power", "Battery Power", "UPS Power"
    battery_percent: int | None  # None on Macs without a battery

    @property
    def on_ac_power(self) -> bool:
        return self.source == "AC Power"


@dataclass(frozen=True)
class ThermalStatus:
    cpu_speed_limit_percent: int | None  # None until macOS has recorded a limit

    @property
    def is_throttled(self) -> bool:
        return self.cpu_speed_limit_percent is not None and self.cpu_speed_limit_percent < 100


def parse_pmset_batt(text: str) -> PowerStatus:
    source = _SOURCE_PATTERN.search(text)
    if source is None:
        raise HardwareParseError("no \"Now drawing from '...'\" line in pmset -g batt output")
    charge = _CHARGE_PATTERN.search(text)
    percent = int(charge.group(1)) if charge else None
    if percent is not None and percent > 100:
        raise HardwareParseError(f"battery charge {percent}% is over 100%")
    return PowerStatus(source=source.group(1), battery_percent=percent)


def parse_pmset_therm(text: str) -> ThermalStatus:
    limit = _SPEED_LIMIT_PATTERN.search(text)
    if limit is not None:
        return ThermalStatus(cpu_speed_limit_percent=int(limit.group(1)))
    if "has been recorded" in text:
        return ThermalStatus(cpu_speed_limit_percent=None)
    raise HardwareParseError("pmset -g therm output has neither CPU_Speed_Limit nor notes")
