"""Every recorded macOS output (fixtures/macos/recorded) parses to the right values."""

from __future__ import annotations

import pytest

from contracts.chips import lookup_chip
from contracts.hardware import ChipTier, ThunderboltLink
from node_agent.hardware import (
    parse_hardware_json,
    parse_hardware_text,
    parse_thunderbolt_json,
    parse_thunderbolt_text,
    thunderbolt_links,
)
from tests.node_agent.hardware._fixtures import RECORDED, recorded

GIB = 2**30
STUDIO_TB = "mac-studio-m3-ultra-cabled-to-macbook-SPThunderboltDataType.json"
MACBOOK_TB = "macbook-pro-m5-max-cabled-to-studio-SPThunderboltDataType.json"
MINI_TB = "mac-mini-m4-pro-cabled-to-studio-m4-max-SPThunderboltDataType-partial.txt"
STUDIO_BUS_1 = "28CA4C30-A263-4C55-B302-953416D0B209"
MACBOOK_BUS_0 = "817DCFA4-B481-4100-80FC-91C7AA969F0B"


def test_every_recorded_file_is_covered_here() -> None:
    covered = {
        STUDIO_TB,
        MACBOOK_TB,
        MINI_TB,
        "macbook-pro-m4-max-48gb-SPHardwareDataType.json",
        "apple-virtual-machine-on-m4-max-SPHardwareDataType.json",
        "macbook-pro-m1-pro-16gb-SPHardwareDataType-mini.txt",
        "macbook-pro-m2-pro-16gb-SPHardwareDataType-mini.txt",
        "mac-studio-m3-ultra-512gb-sysctl-brand-and-SPHardwareDataType-grep.txt",
    }
    assert {p.name for p in RECORDED.iterdir() if p.name != "README.md"} == covered


def test_m3_ultra_studio_is_cabled_to_the_m5_max_macbook_at_80_gbps() -> None:
    buses = parse_thunderbolt_json(recorded(STUDIO_TB))
    assert [bus.port for bus in buses] == [f"bus_{n}" for n in (5, 4, 3, 2, 1, 0)]
    assert thunderbolt_links(buses) == (
        ThunderboltLink(
            port="bus_1",
            speed_gbps=80,
            thunderbolt_version=5,
            peer_model_identifier="Mac17,7",
            peer_name="MacBook Pro",
            peer_uid=MACBOOK_BUS_0,
            peer_rdma_capable=True,
            local_domain_uuid=STUDIO_BUS_1,
        ),
    )


def test_studio_idle_ports_report_capability_and_no_link() -> None:
    buses = {bus.port: bus for bus in parse_thunderbolt_json(recorded(STUDIO_TB))}
    idle = [buses[port] for port in ("bus_0", "bus_2", "bus_4", "bus_5")]
    assert all(not bus.connected and bus.speed_gbps == 120 and not bus.peers for bus in idle)


def test_studio_storage_device_is_a_peer_but_not_a_mac_link() -> None:
    bus_3 = {bus.port: bus for bus in parse_thunderbolt_json(recorded(STUDIO_TB))}["bus_3"]
    assert bus_3.connected and bus_3.speed_gbps == 80
    (drive,) = bus_3.peers
    assert (drive.name, drive.vendor_name, drive.is_mac) == (
        "Envoy Ultra",
        "Other World Computing",
        False,
    )
    assert all(link.port != "bus_3" for link in thunderbolt_links((bus_3,)))


def test_m5_max_macbook_is_cabled_to_the_studio_without_an_rdma_service() -> None:
    (link,) = thunderbolt_links(parse_thunderbolt_json(recorded(MACBOOK_TB)))
    assert link == ThunderboltLink(
        port="bus_0",
        speed_gbps=80,
        thunderbolt_version=5,
        peer_model_identifier="Mac15,14",
        peer_name="Mac Studio",
        peer_uid=STUDIO_BUS_1,
        # The Studio advertised only the IP service when this was captured.
        peer_rdma_capable=False,
        local_domain_uuid=MACBOOK_BUS_0,
    )


def test_both_ends_of_the_studio_macbook_cable_match() -> None:
    (studio,) = thunderbolt_links(parse_thunderbolt_json(recorded(STUDIO_TB)))
    (macbook,) = thunderbolt_links(parse_thunderbolt_json(recorded(MACBOOK_TB)))
    assert studio.peer_uid == macbook.local_domain_uuid
    assert macbook.peer_uid == studio.local_domain_uuid


def test_mac_mini_text_form_links_to_an_rdma_capable_m4_max_studio() -> None:
    buses = parse_thunderbolt_text(recorded(MINI_TB))
    assert [(bus.port, bus.switch_uid) for bus in buses] == [("bus_2", "0x05AC897E0A474D02")]
    assert thunderbolt_links(buses) == (
        ThunderboltLink(
            port="bus_2",
            speed_gbps=80,
            thunderbolt_version=5,
            peer_model_identifier="Mac16,9",
            peer_name="Mac Studio",
            peer_uid="88F10ACA-5CAA-4F5D-8361-03EED54ACB5A",
            peer_rdma_capable=True,
            local_domain_uuid="7F158861-C131-4D0D-83B6-CA50EF76C32B",
        ),
    )


def test_m4_max_macbook_pro_json() -> None:
    overview = parse_hardware_json(recorded("macbook-pro-m4-max-48gb-SPHardwareDataType.json"))
    assert overview.chip == "Apple M4 Max"
    assert overview.memory_bytes == 48 * GIB
    assert (overview.model_name, overview.model_identifier) == ("MacBook Pro", "Mac16,5")
    assert (overview.cpu_cores, overview.cpu_core_tiers) == (16, (12, 4))
    assert not overview.is_virtual_machine
    # 48 GB is sold only with the 40-core GPU, so the table needs no GPU count here.
    chip = lookup_chip(overview.chip, memory_gb=48, cpu_cores=overview.cpu_cores)
    assert chip is not None and (chip.gpu_cores, chip.bandwidth_gb_s) == (40, 546.0)


def test_virtual_machine_json_has_a_bare_integer_processor_count() -> None:
    overview = parse_hardware_json(
        recorded("apple-virtual-machine-on-m4-max-SPHardwareDataType.json")
    )
    assert overview.chip == "Apple M4 Max (Virtual)"
    assert overview.memory_bytes == 4 * GIB
    assert (overview.model_name, overview.model_identifier) == (
        "Apple Virtual Machine 1",
        "VirtualMac2,1",
    )
    assert (overview.cpu_cores, overview.cpu_core_tiers) == (2, ())
    assert overview.is_virtual_machine
    chip = lookup_chip(overview.chip)
    assert chip is not None and chip.chip == "M4 Max" and chip.tier is ChipTier.MAX


@pytest.mark.parametrize(
    ("name", "chip", "model_identifier", "cores", "tiers"),
    [
        (
            "macbook-pro-m1-pro-16gb-SPHardwareDataType-mini.txt",
            "Apple M1 Pro",
            "MacBookPro18,1",
            10,
            (8, 2),
        ),
        (
            "macbook-pro-m2-pro-16gb-SPHardwareDataType-mini.txt",
            "Apple M2 Pro",
            "Mac14,10",
            12,
            (8, 4),
        ),
    ],
)
def test_macbook_pro_mini_text(
    name: str, chip: str, model_identifier: str, cores: int, tiers: tuple[int, ...]
) -> None:
    overview = parse_hardware_text(recorded(name))
    assert overview.chip == chip
    assert overview.memory_bytes == 16 * GIB
    assert (overview.model_name, overview.model_identifier) == ("MacBook Pro", model_identifier)
    assert (overview.cpu_cores, overview.cpu_core_tiers) == (cores, tiers)


def test_m1_pro_ten_core_cpu_resolves_to_the_ten_core_variant() -> None:
    overview = parse_hardware_text(recorded("macbook-pro-m1-pro-16gb-SPHardwareDataType-mini.txt"))
    chip = lookup_chip(overview.chip, memory_gb=16, cpu_cores=overview.cpu_cores)
    assert chip is not None
    assert (chip.cpu_cores, chip.gpu_cores, chip.bandwidth_gb_s) == (10, 14, 200.0)


def test_m3_ultra_grep_output() -> None:
    text = recorded("mac-studio-m3-ultra-512gb-sysctl-brand-and-SPHardwareDataType-grep.txt")
    awk_memory, brand_string, *_ = text.splitlines()
    assert (awk_memory, brand_string) == ("512 GB", "Apple M3 Ultra")
    overview = parse_hardware_text(text)  # the two loose lines above are skipped
    assert overview.chip == "Apple M3 Ultra"
    assert overview.memory_bytes == 512 * GIB
    assert (overview.cpu_cores, overview.cpu_core_tiers) == (32, (24, 8))
    assert overview.model_identifier == ""
    chip = lookup_chip(brand_string, memory_gb=512, cpu_cores=overview.cpu_cores)
    assert chip is not None
    assert (chip.chip, chip.gpu_cores, chip.bandwidth_gb_s, chip.thunderbolt_version) == (
        "M3 Ultra",
        80,
        819.0,
        5,
    )
