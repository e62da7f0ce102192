"""Hardware discovery for the node agent: what this Mac (or Linux host) can offer.

`discover_host` reads a real host, `simulated_profile` declares one for
--profile, and the parsers turn each macOS command's output into values.
This package runs commands only through an injected Runner and never imports MLX.
"""

from node_agent.hardware.discover import HostActivity, discover_host, read_host_activity
from node_agent.hardware.displays import Gpu, gpu_core_count, parse_displays_json
from node_agent.hardware.errors import (
    CommandError,
    HardwareError,
    HardwareParseError,
    UnknownProfileError,
    UnsupportedPlatformError,
)
from node_agent.hardware.hardware_overview import (
    HardwareOverview,
    parse_hardware_json,
    parse_hardware_text,
)
from node_agent.hardware.idle import parse_hid_idle_seconds
from node_agent.hardware.linux import parse_cpu_model_name, parse_meminfo_total_bytes
from node_agent.hardware.power import (
    PowerStatus,
    ThermalStatus,
    parse_pmset_batt,
    parse_pmset_therm,
)
from node_agent.hardware.profiles import PROFILE_EXAMPLES, simulated_profile, valid_profile_names
from node_agent.hardware.rdma import parse_rdma_status
from node_agent.hardware.runner import Runner, subprocess_runner
from node_agent.hardware.sysctl import SysctlValues, parse_sysctl
from node_agent.hardware.thunderbolt import ThunderboltBus, ThunderboltPeer, thunderbolt_links
from node_agent.hardware.thunderbolt_json import parse_thunderbolt_json
from node_agent.hardware.thunderbolt_text import parse_thunderbolt_text

__all__ = [
    "PROFILE_EXAMPLES",
    "CommandError",
    "Gpu",
    "HardwareError",
    "HardwareOverview",
    "HardwareParseError",
    "HostActivity",
    "PowerStatus",
    "Runner",
    "SysctlValues",
    "ThermalStatus",
    "ThunderboltBus",
    "ThunderboltPeer",
    "UnknownProfileError",
    "UnsupportedPlatformError",
    "discover_host",
    "gpu_core_count",
    "parse_cpu_model_name",
    "parse_displays_json",
    "parse_hardware_json",
    "parse_hardware_text",
    "parse_hid_idle_seconds",
    "parse_meminfo_total_bytes",
    "parse_pmset_batt",
    "parse_pmset_therm",
    "parse_rdma_status",
    "parse_sysctl",
    "parse_thunderbolt_json",
    "parse_thunderbolt_text",
    "read_host_activity",
    "simulated_profile",
    "subprocess_runner",
    "thunderbolt_links",
    "valid_profile_names",
]
