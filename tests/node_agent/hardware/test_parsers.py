"""Parsers over hand-written outputs (never recorded; see hand_written/README.md), edge cases."""

from __future__ import annotations

import json

import pytest

from node_agent.hardware import (
    Gpu,
    HardwareParseError,
    gpu_core_count,
    parse_cpu_model_name,
    parse_displays_json,
    parse_hardware_json,
    parse_hardware_text,
    parse_hid_idle_seconds,
    parse_meminfo_total_bytes,
    parse_pmset_batt,
    parse_pmset_therm,
    parse_rdma_status,
    parse_sysctl,
    parse_thunderbolt_json,
    parse_thunderbolt_text,
)
from node_agent.hardware.hardware_overview import parse_number_processors, parse_total_cores
from node_agent.hardware.units import parse_link_speed_gbps, parse_memory_size
from tests.node_agent.hardware._fixtures import hand_written

GIB = 2**30


# Hand-written fixtures ---------------------------------------------------------


def test_hand_written_sysctl() -> None:
    values = parse_sysctl(hand_written("mac-studio-m3-ultra-512gb-sysctl.txt"))
    assert (values.brand_string, values.memory_bytes, values.model_identifier) == (
        "Apple M3 Ultra",
        512 * GIB,
        "Mac15,14",
    )


def test_hand_written_displays_give_gpu_cores() -> None:
    gpus = parse_displays_json(hand_written("mac-studio-m3-ultra-80-core-SPDisplaysDataType.json"))
    assert gpus == (Gpu(name="Apple M3 Ultra", cores=80),)
    laptop = parse_displays_json(hand_written("macbook-pro-m4-max-40-core-SPDisplaysDataType.json"))
    assert gpu_core_count(laptop) == 40


def test_hand_written_studio_hardware_json() -> None:
    overview = parse_hardware_json(
        hand_written("mac-studio-m3-ultra-512gb-SPHardwareDataType.json")
    )
    assert (overview.chip, overview.memory_bytes, overview.cpu_core_tiers) == (
        "Apple M3 Ultra",
        512 * GIB,
        (24, 8),
    )


@pytest.mark.parametrize(
    ("name", "enabled"),
    [("rdma_ctl-status-enabled.txt", True), ("rdma_ctl-status-disabled.txt", False)],
)
def test_hand_written_rdma_status(name: str, enabled: bool) -> None:
    assert parse_rdma_status(hand_written(name)) is enabled


def test_hand_written_ioreg_idle_time_in_seconds() -> None:
    assert parse_hid_idle_seconds(hand_written("ioreg-IOHIDSystem.txt")) == pytest.approx(754.321)


@pytest.mark.parametrize(
    ("name", "on_ac", "percent"),
    [
        ("pmset-g-batt-desktop-ac.txt", True, None),
        ("pmset-g-batt-laptop-ac-charged.txt", True, 100),
        ("pmset-g-batt-laptop-on-battery.txt", False, 85),
    ],
)
def test_hand_written_pmset_batt(name: str, on_ac: bool, percent: int | None) -> None:
    status = parse_pmset_batt(hand_written(name))
    assert (status.on_ac_power, status.battery_percent) == (on_ac, percent)


def test_hand_written_pmset_therm() -> None:
    nominal = parse_pmset_therm(hand_written("pmset-g-therm-nominal.txt"))
    throttled = parse_pmset_therm(hand_written("pmset-g-therm-throttled.txt"))
    assert (nominal.cpu_speed_limit_percent, nominal.is_throttled) == (None, False)
    assert (throttled.cpu_speed_limit_percent, throttled.is_throttled) == (70, True)


# Forms and failures ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("proc 16:12:4", (16, (12, 4))),
        (2, (2, ())),
        ("8", (8, ())),
        # The M5 Pro/Max form reported by third parties: total:super:efficiency:performance.
        ("proc 18:6:0:12", (18, (6, 12))),
        (None, (None, ())),
    ],
)
def test_number_processors_forms(
    value: object, expected: tuple[int | None, tuple[int, ...]]
) -> None:
    assert parse_number_processors(value) == expected


@pytest.mark.parametrize("value", ["proc 16", "sixteen", True, 0, 1.5, ["proc 16:12:4"]])
def test_number_processors_rejects_other_shapes(value: object) -> None:
    with pytest.raises(HardwareParseError):
        parse_number_processors(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("32 (24 Performance and 8 Efficiency)", (32, (24, 8))),
        ("10 (8 performance and 2 efficiency)", (10, (8, 2))),
        ("18 (6 Super and 12 Performance)", (18, (6, 12))),
        ("2", (2, ())),
        ("", (None, ())),
    ],
)
def test_total_cores_text_forms(text: str, expected: tuple[int | None, tuple[int, ...]]) -> None:
    assert parse_total_cores(text) == expected


def test_units() -> None:
    assert parse_memory_size("48 GB") == 48 * GIB
    assert parse_memory_size("1 TB") == 1024 * GIB
    assert parse_link_speed_gbps("80 Gb/s") == 80
    assert parse_link_speed_gbps("Up to 40 Gb/s x1") == 40
    assert parse_link_speed_gbps("Up to 120 Gb/s") == 120  # an idle port's capability
    with pytest.raises(HardwareParseError):
        parse_memory_size("lots")


@pytest.mark.parametrize(
    "text",
    ["", "Apple M3 Ultra\n549755813888\n", "Apple M3 Ultra\n512 GB\nMac15,14\n", "a\n0\nb\n"],
)
def test_sysctl_rejects_bad_output(text: str) -> None:
    with pytest.raises(HardwareParseError):
        parse_sysctl(text)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"SPHardwareDataType": 5}',
        '{"SPHardwareDataType": []}',
        '{"SPHardwareDataType": [{"chip_type": 7}]}',
        '{"SPHardwareDataType": [{"_name": "hardware_overview"}]}',
        '{"SPDisplaysDataType": []}',
    ],
)
def test_hardware_json_rejects_bad_shapes(text: str) -> None:
    with pytest.raises(HardwareParseError):
        parse_hardware_json(text)


def test_displays_reject_a_non_numeric_core_count() -> None:
    text = json.dumps({"SPDisplaysDataType": [{"_name": "GPU", "sppci_cores": "many"}]})
    with pytest.raises(HardwareParseError):
        parse_displays_json(text)


def test_displays_without_cores_report_none() -> None:
    text = json.dumps({"SPDisplaysDataType": [{"_name": "Intel Iris"}]})
    assert gpu_core_count(parse_displays_json(text)) is None


def test_thunderbolt_text_without_buses_is_empty() -> None:
    assert parse_thunderbolt_text("Thunderbolt/USB4:\n\n  No drivers are loaded.\n") == ()


def test_thunderbolt_json_rejects_a_non_list_items() -> None:
    text = json.dumps({"SPThunderboltDataType": [{"_name": "thunderboltusb4_bus_0", "_items": {}}]})
    with pytest.raises(HardwareParseError):
        parse_thunderbolt_json(text)


def test_hardware_text_without_known_keys_is_an_error() -> None:
    with pytest.raises(HardwareParseError):
        parse_hardware_text("Thunderbolt/USB4:\n    Speed: 80 Gb/s\n")


@pytest.mark.parametrize("text", ["", "RDMA: maybe", "enabled or disabled?"])
def test_rdma_status_rejects_unknown_output(text: str) -> None:
    with pytest.raises(HardwareParseError):
        parse_rdma_status(text)


def test_idle_and_power_reject_unrelated_output() -> None:
    for parse in (parse_hid_idle_seconds, parse_pmset_batt, parse_pmset_therm):
        with pytest.raises(HardwareParseError):
            parse("command not found")


def test_linux_proc_parsers() -> None:
    assert parse_meminfo_total_bytes("MemTotal:       16384 kB\nMemFree: 1 kB\n") == 16384 * 1024
    assert parse_cpu_model_name("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n") == "AMD EPYC 7B13"
    assert parse_cpu_model_name("processor\t: 0\nBogoMIPS\t: 48.00\n") is None
    with pytest.raises(HardwareParseError):
        parse_meminfo_total_bytes("MemFree: 1 kB\n")
