"""Parse `system_profiler SPHardwareDataType`, as JSON (-json) or as text.

Both forms give the chip, memory, model and CPU core counts. Their core counts
differ in shape; see parse_number_processors and parse_total_cores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from node_agent.hardware.errors import HardwareParseError
from node_agent.hardware.profiler_json import JsonObject, data_type_items, text_field
from node_agent.hardware.profiler_text import parse_sections
from node_agent.hardware.units import parse_memory_size

_PROC_PATTERN = re.compile(r"proc ([0-9]{1,6}(?::[0-9]{1,6}){2,3})")
_TOTAL_CORES_PATTERN = re.compile(r"([0-9]{1,6})(?:\s*\((.*)\))?")
_CORES_MAX = 4096  # far above any Mac; bounds junk input


@dataclass(frozen=True)
class HardwareOverview:
    chip: str  # "Apple M4 Max", "Apple M4 Max (Virtual)"; "" when absent
    memory_bytes: int | None
    model_name: str  # "MacBook Pro"
    model_identifier: str  # "Mac16,5"
    cpu_cores: int | None
    cpu_core_tiers: tuple[int, ...]  # cores per tier, fastest tier first; () if not split

    @property
    def is_virtual_machine(self) -> bool:
        return self.model_identifier.startswith("VirtualMac") or "(virtual)" in self.chip.lower()


def parse_hardware_json(text: str) -> HardwareOverview:
    """Parse `system_profiler -json SPHardwareDataType` (other data types may be present)."""
    items = data_type_items(text, "SPHardwareDataType")
    if not items:
        raise HardwareParseError("SPHardwareDataType lists no hardware")
    item: JsonObject = items[0]
    memory = text_field(item, "physical_memory")
    cpu_cores, tiers = parse_number_processors(item.get("number_processors"))
    return _checked(
        HardwareOverview(
            chip=text_field(item, "chip_type"),
            memory_bytes=parse_memory_size(memory) if memory else None,
            model_name=text_field(item, "machine_name"),
            model_identifier=text_field(item, "machine_model"),
            cpu_cores=cpu_cores,
            cpu_core_tiers=tiers,
        )
    )


def parse_hardware_text(text: str) -> HardwareOverview:
    """Parse the text form (`-detailLevel mini` or a grep of it); first value of each key wins."""
    fields: dict[str, str] = {}
    for section in parse_sections(text).walk():
        for key, value in section.fields:
            fields.setdefault(key.lower(), value)
    memory = fields.get("memory", "")
    cpu_cores, tiers = parse_total_cores(fields.get("total number of cores", ""))
    return _checked(
        HardwareOverview(
            chip=fields.get("chip", ""),
            memory_bytes=parse_memory_size(memory) if memory else None,
            model_name=fields.get("model name", ""),
            model_identifier=fields.get("model identifier", ""),
            cpu_cores=cpu_cores,
            cpu_core_tiers=tiers,
        )
    )


def parse_number_processors(value: object) -> tuple[int | None, tuple[int, ...]]:
    """JSON `number_processors`: "proc 16:12:4" (total:performance:efficiency) or a bare
    integer in VMs. macOS 26 on M5 Pro/Max is reported (never recorded here) to print
    "proc 18:6:0:12", read as total:super:efficiency:performance; tiers come out (6, 12).
    """
    if value is None:
        return None, ()
    if isinstance(value, int) and not isinstance(value, bool):
        return _bounded(value), ()
    if not isinstance(value, str):
        raise HardwareParseError("number_processors is neither a string nor an integer")
    if re.fullmatch(r"[0-9]{1,6}", value.strip()):
        return _bounded(int(value)), ()
    match = _PROC_PATTERN.fullmatch(value.strip())
    if match is None:
        raise HardwareParseError(f"unknown number_processors form: {value[:40]!r}")
    total, *tiers = (int(part) for part in match.group(1).split(":"))
    if len(tiers) == 3:
        tiers = [tiers[0], tiers[2], tiers[1]]  # fastest tier first
    return _bounded(total), tuple(_bounded(count) for count in tiers if count)


def parse_total_cores(text: str) -> tuple[int | None, tuple[int, ...]]:
    """Text `Total Number of Cores`: "32 (24 Performance and 8 Efficiency)"; macOS 13/14
    print the tier names in lower case. Tiers are listed fastest first.
    """
    if not text.strip():
        return None, ()
    match = _TOTAL_CORES_PATTERN.fullmatch(text.strip())
    if match is None:
        raise HardwareParseError(f"unknown core count form: {text[:60]!r}")
    total, tiers_text = match.groups()
    tiers = re.findall(r"(?<![0-9])([0-9]{1,6})\s+[A-Za-z]+", tiers_text or "")
    return _bounded(int(total)), tuple(_bounded(int(count)) for count in tiers)


def _bounded(count: int) -> int:
    if not 0 < count <= _CORES_MAX:
        raise HardwareParseError(f"implausible core count {count}")
    return count


def _checked(overview: HardwareOverview) -> HardwareOverview:
    if not (overview.chip or overview.memory_bytes or overview.model_identifier):
        raise HardwareParseError("no chip, memory or model identifier in SPHardwareDataType")
    return overview
