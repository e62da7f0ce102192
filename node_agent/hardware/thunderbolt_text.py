"""Parse the text form of `system_profiler SPThunderboltDataType`.

A bus is a section titled "Thunderbolt/USB4 Bus <n>" (older macOS: "Thunderbolt
Bus <n>"); its "Port" section gives status and speed, and a device cabled to it
is a section with a "Vendor Name" or "Device Name" field below the bus.
"""

from __future__ import annotations

import re

from node_agent.hardware.profiler_text import TextSection, parse_sections
from node_agent.hardware.thunderbolt import (
    RDMA_PROTOCOL_ID,
    RDMA_SERVICE_KEY,
    ThunderboltBus,
    ThunderboltPeer,
    port_name,
)
from node_agent.hardware.units import parse_link_speed_gbps

_BUS_TITLE = re.compile(r"thunderbolt(?:/usb4)? bus [0-9]{1,3}", re.IGNORECASE)


def parse_thunderbolt_text(text: str) -> tuple[ThunderboltBus, ...]:
    """Every bus in the text output, in output order; () when there are none."""
    buses = (s for s in parse_sections(text).walk() if _BUS_TITLE.fullmatch(s.title))
    return tuple(_bus(section) for section in buses)


def _bus(section: TextSection) -> ThunderboltBus:
    ports = [s for s in section.walk() if s.title.lower() == "port"]
    connected_ports = [p for p in ports if (p.field("Status") or "").lower() == "device connected"]
    port = (connected_ports or ports or [section])[0]
    speed = port.field("Speed") or ""
    return ThunderboltBus(
        port=port_name(section.title),
        domain_uuid=section.field("Domain UUID") or "",
        switch_uid=section.field("UID") or "",
        connected=bool(connected_ports),
        speed_gbps=parse_link_speed_gbps(speed) if speed else 0,
        peers=tuple(_peer(peer) for peer in _peer_sections(section)),
    )


def _is_peer(section: TextSection) -> bool:
    return section.field("Vendor Name") is not None or section.field("Device Name") is not None


def _peer_sections(section: TextSection) -> list[TextSection]:
    """Devices cabled directly to this bus; ones daisy-chained behind them are skipped."""
    # Start below the bus: the bus names its own Mac in the same fields.
    peers: list[TextSection] = []
    for child in section.children:
        peers.extend([child] if _is_peer(child) else _peer_sections(child))
    return peers


def _peer(section: TextSection) -> ThunderboltPeer:
    return ThunderboltPeer(
        name=section.title,
        device_name=section.field("Device Name") or "",
        vendor_name=section.field("Vendor Name") or "",
        domain_uuid=section.field("Domain UUID") or "",
        rdma_capable=any(_is_rdma_service(s) for s in _own_sections(section)),
    )


def _own_sections(peer: TextSection) -> list[TextSection]:
    """The peer's sections, stopping at devices daisy-chained behind it."""
    own = [peer]
    for child in peer.children:
        if not _is_peer(child):
            own.extend(_own_sections(child))
    return own


def _is_rdma_service(section: TextSection) -> bool:
    key = (section.field("Service Key") or "").strip().lower()
    protocol_id = (section.field("Protocol ID") or "").strip()
    return key == RDMA_SERVICE_KEY or protocol_id == str(RDMA_PROTOCOL_ID)
