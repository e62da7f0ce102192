"""Where a Mac is on the map: pure, from the region its operator published, never from its address.

A region places a Mac when it is coordinates ("38.72, -9.13", or "33.87 S, 151.21 E") or a
time zone or its city ("Europe/Lisbon", "Lisbon", "Sao Paulo"), looked up in places.txt
(tzdata's zone1970.tab: each zone's principal city). Any other region ("my attic") is shown in
the table but not on the map.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import NamedTuple

PLACES_CACHED_MAX = 4_096
PLACES_FILE = Path(__file__).resolve().parent / "places.txt"
_NUMBER = r"(\d{1,3}(?:\.\d+)?)"
_COORDINATES = re.compile(rf"^\s*(-?){_NUMBER}\s*([NSns]?)\s*[,;\s]\s*(-?){_NUMBER}\s*([EWew]?)\s*$")


class Place(NamedTuple):
    lat: float
    lon: float


def _key(name: str) -> str:
    return re.sub(r"[\s_]+", " ", name.strip().lower())


@functools.cache
def _places() -> dict[str, Place]:
    found: dict[str, Place] = {}
    cities: dict[str, Place] = {}
    for line in PLACES_FILE.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        zone, lat, lon = line.split("\t")
        place = Place(float(lat), float(lon))
        found[_key(zone)] = place
        cities.setdefault(_key(zone.rsplit("/", 1)[-1]), place)
    return {**cities, **found}  # a full zone name wins over a city of the same name


def _coordinates(region: str) -> Place | None:
    match = _COORDINATES.match(region)
    if match is None:
        return None
    lat_sign, lat, lat_hemisphere, lon_sign, lon, lon_hemisphere = match.groups()
    latitude = float(lat) * (-1 if lat_sign or lat_hemisphere.upper() == "S" else 1)
    longitude = float(lon) * (-1 if lon_sign or lon_hemisphere.upper() == "W" else 1)
    if not (-90 <= latitude <= 90 and -180 <= longitude <= 180):
        return None
    return Place(round(latitude, 3), round(longitude, 3))


@functools.lru_cache(maxsize=PLACES_CACHED_MAX)  # a big fleet shares a few hundred regions; the map reads all
def place_of(region: str | None) -> Place | None:
    """The map position a published region names, or None when it names none."""
    if not region:
        return None
    return _coordinates(region) or _places().get(_key(region))
