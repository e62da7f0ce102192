"""MLX World's map end to end: a real coordinator and node agents, in Debian's headless Chromium.

A Mac is on the map once a place is published for it (never guessed from its address); the map
updates live, shares the table's filters, and puts a Mac where its region says. Screenshots at
1280x800 and 390x844 go to artifacts/world/ (gitignored).
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from coordinator.storage.database import Database
from coordinator.world import operator_keys
from mlxnet.processes import Child, spawn_node, start_coordinator, start_nodes, wait_until_registered
from tests.coordinator.world.conftest import spki_pin

pytestmark = pytest.mark.e2e

MODEL_ID = "test/tiny-llama"
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "world"
SIZES = ((1280, 800), (390, 844))
UI_WAIT_MS = 90_000  # live updates arrive within a second or two; this bounds a stuck test
LISBON = (-9.13, 38.72)  # lon, lat: places.txt's Europe/Lisbon
TOKYO = (139.74, 35.65)


@dataclass
class MapNetwork:
    work_dir: Path
    model_dir: Path
    coordinator: Child
    nodes: list[Child]
    keys: dict[str, str]

    @property
    def url(self) -> str:
        return f"{self.coordinator.extra['url']}/world"  # https: MLX World is served over TLS

    def publish(self, operator: str, node_id: str, region: str | None) -> None:
        request = urllib.request.Request(
            f"{self.url}/api/operator/nodes/{node_id}/region", method="PUT",
            data=json.dumps({"region": region}).encode(),
            headers={"Authorization": f"Bearer {self.keys[operator]}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30, context=self.coordinator.ssl_context()) as answer:
            assert answer.status == 200


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[MapNetwork]:
    work_dir = tmp_path_factory.mktemp("world-map")
    database_url = f"sqlite:///{work_dir / 'coordinator.db'}"
    coordinator = start_coordinator(work_dir, database_url=database_url, heartbeat_interval_ms=500,
                                    allow_anonymous=True)
    net = MapNetwork(work_dir, tiny_model_dir, coordinator, [], {})
    try:
        db = Database(database_url)
        try:
            with db.transaction() as session:
                net.keys = {op: operator_keys.create_operator_key(session, op, "e2e", 1)[1]
                            for op in ("alice", "carol")}
        finally:
            db.dispose()
        net.nodes = start_nodes(work_dir, coordinator.extra["address"],
                                [("alice-mini", [f"{MODEL_ID}={tiny_model_dir}"], "m4-pro-64", "alice")],
                                coordinator.trust)
        yield net
    finally:
        for child in [*net.nodes, coordinator]:
            child.stop()


@pytest.fixture(scope="module")
def browser_args(network: MapNetwork) -> list[str]:
    """Chromium trusts the coordinator's self-signed certificate by its pinned key, nothing else."""
    return [f"--ignore-certificate-errors-spki-list={spki_pin(network.coordinator.extra['certificate'])}"]


@pytest.fixture(scope="module")
def pages(browser, network: MapNetwork) -> Iterator[dict]:  # type: ignore[no-untyped-def]
    contexts = [browser.new_context(viewport={"width": w, "height": h}) for w, h in SIZES]
    opened = {size: context.new_page() for size, context in zip(SIZES, contexts)}
    for page in opened.values():
        page.set_default_timeout(UI_WAIT_MS)
    yield opened
    for context in contexts:
        context.close()


def _drawn_at(page, node_id: str):  # type: ignore[no-untyped-def]
    """Where the map draws the Mac, once it does."""
    page.wait_for_function("(id) => window.__mlxWorldMap && window.__mlxWorldMap.positionOf(id) !== null", arg=node_id)
    return page.evaluate("(id) => window.__mlxWorldMap.positionOf(id)", node_id)


def _place(page, lon_lat: tuple[float, float]) -> list[float]:  # type: ignore[no-untyped-def]
    return page.evaluate("([lon, lat]) => window.__mlxWorldMap.placeOnScreen(lon, lat)", list(lon_lat))


def _shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    path = ARTIFACTS / f"{name}-{size['width']}x{size['height']}.png"
    page.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 0


def test_a_published_region_puts_a_mac_in_its_place(network: MapNetwork, pages) -> None:  # type: ignore[no-untyped-def]
    alice = network.nodes[0].extra["node_id"]
    for page in pages.values():
        page.goto(network.url + "#/fleet")
        page.locator(".map-status", has_text="1 without a published place").wait_for()
        page.evaluate("window.__sameDocument = true")
    network.publish("alice", alice, "Europe/Lisbon")
    for page in pages.values():
        drawn = _drawn_at(page, alice)
        x, y = _place(page, LISBON)
        assert abs(drawn["x"] - x) < 0.5 and abs(drawn["y"] - y) < 0.5
        width = page.evaluate("document.querySelector('.map-canvas').getBoundingClientRect().width")
        assert 0.35 * width < drawn["x"] < 0.5 * width  # Lisbon: just west of the map's middle
        assert drawn["state"] == "idle" and drawn["count"] == 1
        page.locator(".map-status", has_text="1 Mac on the map").wait_for()
    network.publish("alice", alice, "35.65 N, 139.74 E")  # coordinates work as well as names
    for page in pages.values():
        page.wait_for_function("([id, x]) => window.__mlxWorldMap.positionOf(id)?.x > x",
                               arg=[alice, _place(page, LISBON)[0] + 100])
        drawn = _drawn_at(page, alice)
        x, y = _place(page, TOKYO)
        assert abs(drawn["x"] - x) < 0.5 and abs(drawn["y"] - y) < 0.5


def test_a_new_mac_appears_live_and_a_filter_hides_it(network: MapNetwork, pages) -> None:  # type: ignore[no-untyped-def]
    # The node's own setting (`mlxnet node config --region`, or --region for one run) places it.
    child = spawn_node(network.work_dir, "carol-max", network.coordinator.extra["address"],
                       [f"{MODEL_ID}={network.model_dir}"], profile="m4-max-128", operator="carol",
                       trust=network.coordinator.trust, extra_args=("--region", "Lisbon"))
    network.nodes.append(child)
    carol = wait_until_registered(child).extra["node_id"]
    for page in pages.values():
        drawn = _drawn_at(page, carol)
        assert page.evaluate("window.__sameDocument") is True  # it arrived live: no reload
        x, y = _place(page, LISBON)
        assert abs(drawn["x"] - x) < 0.5 and abs(drawn["y"] - y) < 0.5
        page.locator(".map-status", has_text="2 Macs on the map").wait_for()
        _shoot(page, "map")
    page = pages[SIZES[0]]
    page.locator("select[name=chip] option[value='Apple M4 Pro']").wait_for(state="attached")
    page.select_option("select[name=chip]", "Apple M4 Pro")  # the table's filter, shared by the map
    page.wait_for_function("(id) => window.__mlxWorldMap.positionOf(id) === null", arg=carol)
    assert page.evaluate("(id) => window.__mlxWorldMap.positionOf(id)",
                         network.nodes[0].extra["node_id"]) is not None
    page.locator(".map-status", has_text="1 Mac on the map").wait_for()
    page.locator(".fleet-row .name", has_text="alice-mini").wait_for()
    assert page.locator(".fleet-row .name", has_text="carol-max").count() == 0
    _shoot(page, "map-filtered")
    page.select_option("select[name=chip]", "")
    _drawn_at(page, carol)
