"""Thunderbolt buses, the devices cabled to them, and the Mac-to-Mac links among them.

Both system_profiler forms (thunderbolt_json, thunderbolt_text) parse into the
buses below; thunderbolt_links keeps only buses cabled directly to another Mac.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contracts.hardware import ThunderboltLink

# Peers advertise RDMA over Thunderbolt as an XDomain service with this protocol
# id; the text form also names its service key "rdma".
RDMA_PROTOCOL_ID = 64087
RDMA_SERVICE_KEY = "rdma"
# A Mac peer's device name is its model identifier; storage and docks use product names.
_MODEL_IDENTIFIER = re.compile(
    r"(Mac|MacBookPro|MacBookAir|MacBook|Macmini|MacPro|iMac|iMacPro|VirtualMac)[0-9]{1,3},[0-9]{1,3}"
)
_TB5_SPEED_GBPS_MIN = 80  # TB4 and TB3 links run at 40 Gb/s at most


@dataclass(frozen=True)
class ThunderboltPeer:
    """A device at the far end of a bus: another Mac, a drive, a dock."""

    name: str  # "MacBook Pro", "Envoy Ultra"
    device_name: str  # "Mac17,7" for a Mac
    vendor_name: str
    domain_uuid: str  # only Macs have a Thunderbolt domain of their own
    rdma_capable: bool

    @property
    def is_mac(self) -> bool:
        return _MODEL_IDENTIFIER.fullmatch(self.device_name) is not None


@dataclass(frozen=True)
class ThunderboltBus:
    """One of this Mac's Thunderbolt buses (one receptacle each on Apple silicon)."""

    port: str  # "bus_1"
    domain_uuid: str
    switch_uid: str
    connected: bool  # a cable with a device on it
    speed_gbps: int  # negotiated speed when connected, capability when idle; 0 unknown
    peers: tuple[ThunderboltPeer, ...]


def thunderbolt_links(buses: tuple[ThunderboltBus, ...]) -> tuple[ThunderboltLink, ...]:
    """One link per Mac cabled directly to a connected bus, in bus order."""
    return tuple(
        ThunderboltLink(
            port=bus.port,
            speed_gbps=bus.speed_gbps,
            thunderbolt_version=5 if bus.speed_gbps >= _TB5_SPEED_GBPS_MIN else 4,
            peer_model_identifier=peer.device_name,
            peer_name=peer.name,
            peer_uid=peer.domain_uuid,
            peer_rdma_capable=peer.rdma_capable,
            local_domain_uuid=bus.domain_uuid,
        )
        for bus in buses
        if bus.connected
        for peer in bus.peers
        if peer.is_mac
    )


def port_name(bus_title: str) -> str:
    """ "thunderboltusb4_bus_1" or "Thunderbolt/USB4 Bus 1" -> "bus_1"."""
    match = re.search(r"bus[ _]?([0-9]{1,3})$", bus_title.strip(), re.IGNORECASE)
    return f"bus_{match.group(1)}" if match else bus_title.strip()
