"""discover_host driven by a fake runner (macOS) and by this machine (Linux)."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path

import pytest

from contracts.hardware import ChipTier, HardwareReport
from node_agent.hardware import (
    CommandError,
    HardwareParseError,
    HostActivity,
    UnsupportedPlatformError,
    discover_host,
    read_host_activity,
)
from node_agent.hardware.discover import SW_VERS_ARGV, SYSTEM_PROFILER_ARGV
from node_agent.hardware.idle import IOREG_HID_ARGV
from node_agent.hardware.power import PMSET_BATT_ARGV, PMSET_THERM_ARGV
from node_agent.hardware.rdma import RDMA_CTL_STATUS_ARGV
from node_agent.hardware.sysctl import SYSCTL_ARGV
from tests.node_agent.hardware._fixtures import hand_written, merged_profiler_json, recorded

GIB = 2**30


class FakeRunner:
    """Answers each argv with a canned output, or raises CommandError for unknown ones."""

    def __init__(self, outputs: dict[tuple[str, ...], str]) -> None:
        self.outputs = outputs
        self.calls: list[tuple[tuple[str, ...], float]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float) -> str:
        self.calls.append((tuple(argv), timeout_s))
        if tuple(argv) not in self.outputs:
            raise CommandError(tuple(argv), "not found on PATH")
        return self.outputs[tuple(argv)]


def studio_runner() -> FakeRunner:
    """The M3 Ultra Studio: recorded Thunderbolt output, hand-written everything else."""
    profiler = merged_profiler_json(
        hand_written("mac-studio-m3-ultra-512gb-SPHardwareDataType.json"),
        hand_written("mac-studio-m3-ultra-80-core-SPDisplaysDataType.json"),
        recorded("mac-studio-m3-ultra-cabled-to-macbook-SPThunderboltDataType.json"),
    )
    return FakeRunner(
        {
            SYSCTL_ARGV: hand_written("mac-studio-m3-ultra-512gb-sysctl.txt"),
            SYSTEM_PROFILER_ARGV: profiler,
            RDMA_CTL_STATUS_ARGV: hand_written("rdma_ctl-status-enabled.txt"),
            SW_VERS_ARGV: hand_written("sw_vers-productVersion-26.2.txt"),
            IOREG_HID_ARGV: hand_written("ioreg-IOHIDSystem.txt"),
            PMSET_BATT_ARGV: hand_written("pmset-g-batt-desktop-ac.txt"),
            PMSET_THERM_ARGV: hand_written("pmset-g-therm-nominal.txt"),
        }
    )


def test_macos_studio_report() -> None:
    run = studio_runner()
    device_info = {"max_recommended_working_set_size": 400 * GIB, "memory_size": 512 * GIB}
    report = discover_host(run, device_info=device_info, system="Darwin")
    assert (report.chip, report.chip_family, report.chip_tier) == (
        "Apple M3 Ultra",
        "M3",
        ChipTier.ULTRA,
    )
    assert (report.memory_bytes, report.gpu_working_set_bytes) == (512 * GIB, 400 * GIB)
    assert (report.gpu_cores, report.memory_bandwidth_gb_s) == (80, 819.0)
    assert (report.os_name, report.model_identifier) == ("macOS 26.2", "Mac15,14")
    assert report.rdma_enabled and not report.simulated
    (link,) = report.thunderbolt_links
    assert (link.port, link.speed_gbps, link.peer_model_identifier, link.peer_rdma_capable) == (
        "bus_1",
        80,
        "Mac17,7",
        True,
    )


def test_macos_runs_each_command_once_with_a_timeout() -> None:
    run = studio_runner()
    discover_host(run, system="Darwin")
    argvs = [argv for argv, _ in run.calls]
    assert sorted(argvs) == sorted(
        [SYSCTL_ARGV, SYSTEM_PROFILER_ARGV, RDMA_CTL_STATUS_ARGV, SW_VERS_ARGV]
    )
    assert all(0 < timeout_s <= 60 for _, timeout_s in run.calls)


def test_macos_without_device_info_assumes_three_quarters_of_memory() -> None:
    report = discover_host(studio_runner(), system="Darwin")
    assert report.gpu_working_set_bytes == 384 * GIB


def test_macos_degrades_when_optional_outputs_are_missing() -> None:
    # The recorded M4 Max MacBook: no displays or Thunderbolt section, no rdma_ctl
    # (macOS 15), no sw_vers. Memory alone picks the 40-core variant.
    run = FakeRunner(
        {
            SYSCTL_ARGV: hand_written("macbook-pro-m4-max-48gb-sysctl.txt"),
            SYSTEM_PROFILER_ARGV: recorded("macbook-pro-m4-max-48gb-SPHardwareDataType.json"),
        }
    )
    report = discover_host(run, system="Darwin")
    assert (report.chip, report.memory_bytes, report.model_identifier) == (
        "Apple M4 Max",
        48 * GIB,
        "Mac16,5",
    )
    assert (report.gpu_cores, report.memory_bandwidth_gb_s) == (40, 546.0)
    assert (report.thunderbolt_links, report.rdma_enabled, report.os_name) == ((), False, "macOS")


def test_macos_uses_the_displays_gpu_count_when_present() -> None:
    profiler = merged_profiler_json(
        recorded("macbook-pro-m4-max-48gb-SPHardwareDataType.json"),
        hand_written("macbook-pro-m4-max-40-core-SPDisplaysDataType.json"),
    )
    run = FakeRunner(
        {
            SYSCTL_ARGV: hand_written("macbook-pro-m4-max-48gb-sysctl.txt"),
            SYSTEM_PROFILER_ARGV: profiler,
            RDMA_CTL_STATUS_ARGV: hand_written("rdma_ctl-status-disabled.txt"),
        }
    )
    report = discover_host(run, system="Darwin")
    assert (report.gpu_cores, report.chip_tier, report.rdma_enabled) == (40, ChipTier.MAX, False)


def test_macos_virtual_machine_reports_no_links() -> None:
    run = FakeRunner(
        {
            SYSCTL_ARGV: "Apple M4 Max (Virtual)\n4294967296\nVirtualMac2,1\n",
            SYSTEM_PROFILER_ARGV: merged_profiler_json(
                recorded("apple-virtual-machine-on-m4-max-SPHardwareDataType.json"),
                recorded("macbook-pro-m5-max-cabled-to-studio-SPThunderboltDataType.json"),
            ),
        }
    )
    report = discover_host(run, system="Darwin")
    assert (report.model_identifier, report.memory_bytes, report.thunderbolt_links) == (
        "VirtualMac2,1",
        4 * GIB,
        (),
    )


def test_macos_sysctl_failure_is_raised() -> None:
    with pytest.raises(CommandError):
        discover_host(FakeRunner({}), system="Darwin")
    with pytest.raises(HardwareParseError):
        discover_host(FakeRunner({SYSCTL_ARGV: "garbage"}), system="Darwin")


def test_linux_discovery_on_this_host() -> None:
    if platform.system() != "Linux":
        pytest.skip("reads /proc")
    report = discover_host()
    assert isinstance(report, HardwareReport)
    assert report.chip_tier is ChipTier.NOT_APPLE and report.chip_family == ""
    assert report.memory_bytes > 0 and report.gpu_working_set_bytes == report.memory_bytes
    assert report.memory_bandwidth_gb_s == 0.0 and report.gpu_cores == 0
    assert report.os_name.startswith("Linux ") and report.chip
    assert not report.simulated and report.thunderbolt_links == ()


def test_linux_discovery_from_a_fake_proc(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text("MemTotal:       8388608 kB\n")
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Test CPU 9000\n")
    report = discover_host(
        system="Linux",
        proc_root=tmp_path,
        device_info={"max_recommended_working_set_size": 2 * GIB},
        memory_bandwidth_gb_s=50.0,
    )
    assert (report.chip, report.memory_bytes, report.gpu_working_set_bytes) == (
        "Test CPU 9000",
        8 * GIB,
        2 * GIB,
    )
    assert report.memory_bandwidth_gb_s == 50.0


def test_linux_caps_an_oversized_working_set_at_memory(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text("MemTotal:       1048576 kB\n")
    (tmp_path / "cpuinfo").write_text("")
    report = discover_host(
        system="Linux",
        proc_root=tmp_path,
        device_info={"max_recommended_working_set_size": 9 * GIB},
    )
    assert report.gpu_working_set_bytes == report.memory_bytes == GIB


def test_linux_without_proc_is_unsupported(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedPlatformError):
        discover_host(system="Linux", proc_root=tmp_path / "missing")


def test_other_platforms_are_unsupported() -> None:
    with pytest.raises(UnsupportedPlatformError, match="--profile"):
        discover_host(FakeRunner({}), system="Windows")


def test_host_activity_on_macos() -> None:
    activity = read_host_activity(studio_runner(), system="Darwin")
    assert activity.idle_seconds == pytest.approx(754.321)
    assert (activity.on_ac_power, activity.cpu_speed_limit_percent) == (True, None)


def test_host_activity_elsewhere_is_unknown() -> None:
    assert read_host_activity(FakeRunner({}), system="Linux") == HostActivity(None, None, None)
