"""Where a published region puts a Mac, and the map's columns (pure)."""

from __future__ import annotations

import pytest

from coordinator.world.map_view import STATES, map_payload, state_of
from coordinator.world.places import Place, place_of


@pytest.mark.parametrize(("region", "place"), [
    ("Europe/Lisbon", Place(38.72, -9.13)),
    ("lisbon", Place(38.72, -9.13)),
    ("America/Sao_Paulo", Place(-23.53, -46.62)),
    ("Sao Paulo", Place(-23.53, -46.62)),
    ("38.72, -9.13", Place(38.72, -9.13)),
    ("33.87 S, 151.21 E", Place(-33.87, 151.21)),
    ("40.7N 74.0W", Place(40.7, -74.0)),
])
def test_names_and_coordinates_place_a_mac(region: str, place: Place) -> None:
    assert place_of(region) == place


@pytest.mark.parametrize("region", [None, "", "my attic", "95, 10", "10, 190", "US/California"])
def test_anything_else_places_nothing(region: str | None) -> None:
    assert place_of(region) is None


def test_states_and_columns() -> None:
    assert state_of(False, True, True) == "offline"
    assert state_of(True, True, True) == "working"
    assert state_of(True, False, True) == "owner_back"
    assert state_of(True, False, False) == "idle"
    rows = [("node-a", "a", 100, None, False, "Tokyo"), ("node-b", "b", 100, None, True, "attic"),
            ("node-c", "c", 10, None, False, "Lisbon"), ("node-d", "d", 100, 50, False, "Lisbon")]
    payload = map_payload(rows, {"node-a"}, {"node-a": "pod-1"}, fresh_since_ms=50, macs_max=10, version=7)
    macs = payload["macs"]
    assert macs["id"] == ["node-a", "node-c", "node-d"] and payload["unplaced"] == 1  # type: ignore[index]
    assert [STATES[code] for code in macs["state"]] == ["working", "offline", "offline"]  # type: ignore[index]
    assert macs["pod"] == ["pod-1", None, None] and payload["truncated"] is False  # type: ignore[index]
    capped = map_payload(rows, set(), {}, fresh_since_ms=50, macs_max=2, version=7)
    assert capped["truncated"] is True and capped["matched"] == 2 and len(capped["macs"]["id"]) == 1  # type: ignore[index]
