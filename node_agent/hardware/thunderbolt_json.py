"""Parse `system_profiler -json SPThunderboltDataType` into ThunderboltBus values.

Each top-level item is a bus; its `receptacle_<n>_tag` object holds the port
status and speed, and its `_items` are the devices cabled to it.
"""

from __future__ import annotations

from node_agent.hardware.errors import HardwareParseError
from node_agent.hardware.profiler_json import JsonObject, data_type_items, object_list, text_field
from node_agent.hardware.thunderbolt import (
    RDMA_PROTOCOL_ID,
    RDMA_SERVICE_KEY,
    ThunderboltBus,
    ThunderboltPeer,
    port_name,
)
from node_agent.hardware.units import parse_link_speed_gbps


def parse_thunderbolt_json(text: str) -> tuple[ThunderboltBus, ...]:
    """Every bus listed under SPThunderboltDataType, in output order."""
    return tuple(_bus(item) for item in data_type_items(text, "SPThunderboltDataType"))


def _bus(item: JsonObject) -> ThunderboltBus:
    receptacle = _receptacle(item)
    speed = text_field(receptacle, "current_speed_key")
    peers = object_list(item.get("_items", []), "Thunderbolt bus _items")
    return ThunderboltBus(
        port=port_name(text_field(item, "_name")),
        domain_uuid=text_field(item, "domain_uuid_key"),
        switch_uid=text_field(item, "switch_uid_key"),
        connected=text_field(receptacle, "receptacle_status_key") == "receptacle_connected",
        speed_gbps=parse_link_speed_gbps(speed) if speed else 0,
        peers=tuple(_peer(peer) for peer in peers),
    )


def _receptacle(item: JsonObject) -> JsonObject:
    # Buses carry one "receptacle_1_tag"; match the pattern in case the number differs.
    for key, value in item.items():
        if key.startswith("receptacle_") and key.endswith("_tag"):
            if not isinstance(value, dict):
                raise HardwareParseError(f"{key} is not an object")
            return value
    return {}


def _peer(item: JsonObject) -> ThunderboltPeer:
    services = object_list(item.get("services_title", []), "Thunderbolt services_title")
    return ThunderboltPeer(
        name=text_field(item, "_name"),
        device_name=text_field(item, "device_name_key"),
        vendor_name=text_field(item, "vendor_name_key"),
        domain_uuid=text_field(item, "domain_uuid_key"),
        rdma_capable=any(_is_rdma_service(service) for service in services),
    )


def _is_rdma_service(service: JsonObject) -> bool:
    # The JSON form mangles service_key_key ("ˇˇˇˇˇˇAD"), so the protocol id decides.
    protocol_id = service.get("protocol_id_key")
    if isinstance(protocol_id, str) and protocol_id.strip().isdecimal():
        protocol_id = int(protocol_id)
    key = service.get("service_key_key")
    return protocol_id == RDMA_PROTOCOL_ID or (isinstance(key, str) and key == RDMA_SERVICE_KEY)
