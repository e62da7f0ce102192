"""The fleet list in Chromium over thousands of Macs: only the rows in view exist, and any row can be reached."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.world import load_fleet
from coordinator.clock import SystemClock
from coordinator.config import CoordinatorConfig
from coordinator.service import CoordinatorService
from coordinator.storage.database import Database, upgrade_schema
from tests.coordinator.world.server import serve_world

MACS = 3_000
ROWS_IN_PAGE_MAX = 80  # what fills the view plus overscan, whatever the fleet's size
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def big_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('big-world')) / 'world.db'}"
    upgrade_schema(url)
    db = Database(url)
    try:
        load_fleet(db, MACS, 30, SystemClock().now_ms())
        service = CoordinatorService(db, SystemClock(), CoordinatorConfig(database_url=url))
        with serve_world(service) as (base, _):
            yield base + "/world"
    finally:
        db.dispose()


def _api(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("size", [(1280, 800), (390, 844)])
def test_only_rows_in_view_are_rendered_and_a_far_row_loads_on_scroll(browser, big_world: str,  # type: ignore[no-untyped-def]
                                                                       size: tuple[int, int]) -> None:
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    try:
        page.goto(big_world + "#/fleet")
        page.locator(".fleet-rows .fleet-row[aria-rowindex='2'] .name").wait_for()
        assert page.locator(".fleet-summary").inner_text() == f"{MACS:,} Macs in the network"
        assert page.get_attribute(".fleet-table", "aria-rowcount") == str(MACS + 1)
        assert page.locator(".fleet-rows .fleet-row").count() <= ROWS_IN_PAGE_MAX
        target = MACS // 2 + 7  # in the middle of a server page nobody has fetched yet
        page.evaluate("(index) => { const s = document.querySelector('.fleet-scroll');"
                      " const h = parseFloat(getComputedStyle(document.querySelector('.fleet-table'))"
                      ".getPropertyValue('--row-height')); s.scrollTop = index * h; }", target)
        row = page.locator(f".fleet-rows .fleet-row[aria-rowindex='{target + 2}'] .name")
        row.wait_for()
        expected = _api(f"{big_world}/api/fleet?page={target // 100 + 1}&page_size=100")["nodes"][target % 100]
        assert row.inner_text() == expected["name"]
        assert page.locator(".fleet-rows .fleet-row").count() <= ROWS_IN_PAGE_MAX
    finally:
        context.close()
