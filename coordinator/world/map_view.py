"""MLX World's map, pure: every filtered Mac with a published place, its state and its pod.

Columns, not objects, so 10,000 Macs are one compact answer; the browser draws them on a canvas.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from coordinator.world.places import place_of

WORKING, IDLE, OWNER_BACK, OFFLINE = "working", "idle", "owner_back", "offline"
STATES = (WORKING, IDLE, OWNER_BACK, OFFLINE)  # the answer's state codes index this


def state_of(online: bool, working: bool, owner_active: bool) -> str:
    if not online:
        return OFFLINE
    if working:
        return WORKING
    return OWNER_BACK if owner_active else IDLE


def map_payload(rows: Iterable[Any], working: set[str], pod_of: dict[str, str], fresh_since_ms: int,
                macs_max: int, version: int) -> dict[str, object]:
    """rows: (node_id, display_name, last_heartbeat_ms, left_at_ms, owner_active, region)."""
    columns: dict[str, list[object]] = {name: [] for name in ("id", "name", "lat", "lon", "state", "pod")}
    matched = unplaced = 0
    for node_id, name, last_heartbeat_ms, left_at_ms, owner_active, region in rows:
        matched += 1
        if matched > macs_max:
            break
        place = place_of(region)
        if place is None:
            unplaced += 1
            continue
        online = last_heartbeat_ms >= fresh_since_ms and left_at_ms is None
        columns["id"].append(node_id)
        columns["name"].append(name)
        columns["lat"].append(place.lat)
        columns["lon"].append(place.lon)
        columns["state"].append(STATES.index(state_of(online, node_id in working, bool(owner_active))))
        columns["pod"].append(pod_of.get(node_id))
    return {"version": version, "states": list(STATES), "truncated": matched > macs_max,
            "matched": min(matched, macs_max), "unplaced": unplaced, "macs": columns}
