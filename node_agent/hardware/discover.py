"""Read this host's hardware into a HardwareReport.

On macOS it runs, through an injected runner and each with a timeout:
  sysctl -n machdep.cpu.brand_string hw.memsize hw.model      chip, memory, model
  system_profiler -json SPHardwareDataType SPDisplaysDataType SPThunderboltDataType
                                                              CPU/GPU cores, cables
  rdma_ctl status                                             RDMA (macOS 26.2+)
  sw_vers -productVersion                                     OS version
Commands are named without a path: all live in /usr/bin or /usr/sbin, which
launchd's default PATH includes. On Linux it reads /proc/meminfo and /proc/cpuinfo.
The GPU working-set budget comes from the caller's mx.device_info(): this
package never imports MLX.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from contracts.chips import lookup_chip
from contracts.hardware import ChipTier, HardwareReport, ThunderboltLink
from node_agent.hardware.displays import gpu_core_count, parse_displays_json
from node_agent.hardware.errors import CommandError, HardwareParseError, UnsupportedPlatformError
from node_agent.hardware.hardware_overview import HardwareOverview, parse_hardware_json
from node_agent.hardware.idle import IOREG_HID_ARGV, parse_hid_idle_seconds
from node_agent.hardware.linux import parse_cpu_model_name, parse_meminfo_total_bytes
from node_agent.hardware.power import (
    PMSET_BATT_ARGV,
    PMSET_THERM_ARGV,
    parse_pmset_batt,
    parse_pmset_therm,
)
from node_agent.hardware.profiles import simulated_profile
from node_agent.hardware.rdma import RDMA_CTL_STATUS_ARGV, parse_rdma_status
from node_agent.hardware.runner import Runner, subprocess_runner
from node_agent.hardware.sysctl import SYSCTL_ARGV, parse_sysctl
from node_agent.hardware.thunderbolt import thunderbolt_links
from node_agent.hardware.thunderbolt_json import parse_thunderbolt_json

__all__ = ["HostActivity", "discover_host", "read_host_activity", "simulated_profile"]

logger = logging.getLogger(__name__)

SYSTEM_PROFILER_ARGV = (
    "system_profiler",
    "-json",
    "SPHardwareDataType",
    "SPDisplaysDataType",
    "SPThunderboltDataType",
)
SW_VERS_ARGV = ("sw_vers", "-productVersion")
WORKING_SET_KEY = "max_recommended_working_set_size"
# system_profiler walks the Thunderbolt tree and can take several seconds; the rest are instant.
_PROFILER_TIMEOUT_S = 60.0
_COMMAND_TIMEOUT_S = 10.0
# Metal's default recommended working set is about 75% of unified memory.
_DEFAULT_WORKING_SET_FRACTION = 0.75


@dataclass(frozen=True)
class HostActivity:
    """What the idle-lending policy needs; None where this host cannot say."""

    idle_seconds: float | None  # since the last keyboard/mouse input
    on_ac_power: bool | None
    cpu_speed_limit_percent: int | None  # below 100 once macOS throttles for heat


def discover_host(
    run: Runner = subprocess_runner,
    *,
    device_info: Mapping[str, object] | None = None,
    system: str | None = None,
    proc_root: Path = Path("/proc"),
    memory_bandwidth_gb_s: float = 0.0,
) -> HardwareReport:
    """This host's hardware. system defaults to platform.system() ("Darwin", "Linux").

    memory_bandwidth_gb_s applies to non-Apple hosts only, which the chip table
    cannot describe; Macs take theirs from the table.
    """
    system = system or platform.system()
    if system == "Darwin":
        return _discover_macos(run, device_info)
    if system == "Linux":
        return _discover_linux(proc_root, device_info, memory_bandwidth_gb_s)
    raise UnsupportedPlatformError(
        f"no hardware discovery for {system!r}; run on macOS or Linux, or pass --profile"
    )


def read_host_activity(
    run: Runner = subprocess_runner, *, system: str | None = None
) -> HostActivity:
    """User idle time, power source and throttling (macOS); unknown elsewhere."""
    if (system or platform.system()) != "Darwin":
        return HostActivity(idle_seconds=None, on_ac_power=None, cpu_speed_limit_percent=None)
    idle = parse_hid_idle_seconds(run(IOREG_HID_ARGV, _COMMAND_TIMEOUT_S))
    power = parse_pmset_batt(run(PMSET_BATT_ARGV, _COMMAND_TIMEOUT_S))
    thermal = parse_pmset_therm(run(PMSET_THERM_ARGV, _COMMAND_TIMEOUT_S))
    return HostActivity(idle, power.on_ac_power, thermal.cpu_speed_limit_percent)


def _discover_macos(run: Runner, device_info: Mapping[str, object] | None) -> HardwareReport:
    sysctl = parse_sysctl(run(SYSCTL_ARGV, _COMMAND_TIMEOUT_S))
    profiler_text = run(SYSTEM_PROFILER_ARGV, _PROFILER_TIMEOUT_S)
    overview = parse_hardware_json(profiler_text)
    measured_gpu_cores = _gpu_cores(profiler_text)
    chip = lookup_chip(
        sysctl.brand_string,
        measured_gpu_cores,
        memory_gb=sysctl.memory_bytes // 2**30,
        cpu_cores=overview.cpu_cores,
    )
    if chip is None:
        logger.warning("chip %r is not in the chip table; bandwidth unknown", sysctl.brand_string)
    return HardwareReport(
        chip=sysctl.brand_string,
        chip_family=chip.family if chip else "",
        chip_tier=chip.tier if chip else ChipTier.NOT_APPLE,
        memory_bytes=sysctl.memory_bytes,
        gpu_working_set_bytes=_working_set_bytes(
            sysctl.memory_bytes, device_info, _DEFAULT_WORKING_SET_FRACTION
        ),
        gpu_cores=measured_gpu_cores or (chip.gpu_cores if chip else 0),
        memory_bandwidth_gb_s=chip.bandwidth_gb_s if chip else 0.0,
        os_name=_macos_version(run),
        model_identifier=sysctl.model_identifier or overview.model_identifier,
        thunderbolt_links=_links(profiler_text, overview),
        rdma_enabled=_rdma_enabled(run),
    )


def _gpu_cores(profiler_text: str) -> int | None:
    # A GPU section we cannot read costs only precision: the chip table's
    # conservative variant stands in, so discovery goes on.
    try:
        return gpu_core_count(parse_displays_json(profiler_text))
    except HardwareParseError as error:
        logger.warning(
            "GPU cores unreadable (%s); using the chip table's conservative variant", error
        )
        return None


def _links(profiler_text: str, overview: HardwareOverview) -> tuple[ThunderboltLink, ...]:
    # A VM sees no real Thunderbolt; unreadable Thunderbolt output means "no pod links".
    if overview.is_virtual_machine:
        return ()
    try:
        return thunderbolt_links(parse_thunderbolt_json(profiler_text))
    except HardwareParseError as error:
        logger.warning("Thunderbolt links unreadable (%s); reporting none", error)
        return ()


def _rdma_enabled(run: Runner) -> bool:
    # rdma_ctl exists only on macOS 26.2 and later; without it there is no RDMA.
    try:
        return parse_rdma_status(run(RDMA_CTL_STATUS_ARGV, _COMMAND_TIMEOUT_S))
    except (CommandError, HardwareParseError) as error:
        logger.info("RDMA treated as disabled: %s", error)
        return False


def _macos_version(run: Runner) -> str:
    try:
        version = run(SW_VERS_ARGV, _COMMAND_TIMEOUT_S).strip()
    except CommandError as error:
        logger.warning("macOS version unknown: %s", error)
        return "macOS"
    return f"macOS {version}" if version else "macOS"


def _discover_linux(
    proc_root: Path, device_info: Mapping[str, object] | None, memory_bandwidth_gb_s: float
) -> HardwareReport:
    memory_bytes = parse_meminfo_total_bytes(_read(proc_root / "meminfo"))
    cpu_name = parse_cpu_model_name(_read(proc_root / "cpuinfo"))
    return HardwareReport(
        chip=cpu_name or platform.processor() or platform.machine() or "unknown CPU",
        chip_family="",
        chip_tier=ChipTier.NOT_APPLE,
        memory_bytes=memory_bytes,
        # The CPU build of MLX shares all of RAM, so the budget defaults to all of it.
        gpu_working_set_bytes=_working_set_bytes(memory_bytes, device_info, 1.0),
        gpu_cores=0,
        memory_bandwidth_gb_s=memory_bandwidth_gb_s,
        os_name=f"Linux {platform.release()}",
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise UnsupportedPlatformError(f"cannot read {path}: {error}") from error


def _working_set_bytes(
    memory_bytes: int, device_info: Mapping[str, object] | None, default_fraction: float
) -> int:
    """mx.device_info()'s budget when given (capped at memory), else a fraction of memory."""
    value = (device_info or {}).get(WORKING_SET_KEY)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return min(value, memory_bytes)
    return max(1, int(memory_bytes * default_fraction))
