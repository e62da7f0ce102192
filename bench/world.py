"""MLX World benchmark: a 10,000-Mac fleet in the database, and how fast the fleet API pages through it.

    .venv/bin/python -m bench.world [--macs 10000 --pods 200 --repeats 30] [--browser]
                                    [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/EMPTY_DB]

Loads bench.fleet_sim's simulated fleet (Mac mix, pods, running jobs) as registered
nodes into a fresh database (SQLite in a temporary directory unless --database-url
names an empty one), then times, in this process: fleet pages (first, deep, filtered,
searched, sorted) through World and over HTTP on a real uvicorn server, the facets,
the totals and the live feed's per-tick read, all with the answer cache off (every request
reads the database), and one cached page for comparison. Prints p50/p95/max in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from contracts.ids import JobId, NodeId, OperatorId
from contracts.lending import LendingMode, LendingState
from contracts.pods import PodCable, PodDeclaration
from coordinator.clock import SystemClock
from coordinator.config import CoordinatorConfig
from coordinator.model import JobRecord, JobStatus, NodeRecord
from coordinator.placement.candidates import LendingMode as PlacementMode
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows, node_rows
from coordinator.storage.database import Database, upgrade_schema
from coordinator.world.tables import node_regions
from coordinator.world.world import World

REGIONS = ("Europe/Lisbon", "Europe/Berlin", "US/California", "US/New York", "Asia/Tokyo",
           "Asia/Singapore", "South America/São Paulo", "Oceania/Sydney")
OPERATORS = 2_000
HOUR_MS = 3_600_000


def load_fleet(db: Database, macs: int, pods: int, now_ms: int, seed: int = 1) -> list[str]:
    """Register the simulated fleet's Macs (and its pods, regions and running jobs); returns node ids."""
    from bench.fleet_sim import MODELS, simulate_fleet

    specs = {m.spec.model_id: m.spec for m in MODELS}
    fleet = simulate_fleet(macs, pods, seed)
    rng = random.Random(seed)
    node_ids: list[str] = []
    with db.transaction() as session:
        for index, mac in enumerate(fleet.macs):
            mode = LendingMode.DEDICATED if mac.mode is PlacementMode.DEDICATED else LendingMode.IDLE
            if mode is LendingMode.DEDICATED and mac.hardware.chip_tier.value == "ultra":
                mode = LendingMode.ULTRA_SEAT
            lending = LendingState(mode=mode, owner_active=mac.owner_active,
                                   accepting_jobs=not mac.owner_active,
                                   reason="owner is using this Mac" if mac.owner_active else "")
            registered = now_ms - rng.randrange(30 * 24 * HOUR_MS)
            node = NodeRecord(
                node_id=NodeId(mac.node_id), public_key=rng.randbytes(32),
                operator_id=OperatorId(f"operator{index % OPERATORS:04d}"),
                display_name=f"{mac.hardware.chip.removeprefix('Apple ')} {mac.node_id[-6:]}",
                hardware=mac.hardware, models=tuple(specs[m] for m in sorted(mac.served_models)),
                max_concurrent_jobs=max(1, mac.max_concurrent_jobs), registered_at_ms=registered,
                last_heartbeat_ms=now_ms if mac.online else now_ms - HOUR_MS, lending=lending,
                warm_models=tuple(sorted(mac.warm_models)),
                measured_bandwidth_gb_s=mac.measured_bandwidth_gb_s)
            node_rows.save_node(session, node, f"{index:064x}")
            node_ids.append(mac.node_id)
            session.execute(node_regions.insert().values(node_id=mac.node_id, region=rng.choice(REGIONS),
                                                         updated_at_ms=now_ms))
            if mac.running_jobs and mac.online:
                _running_job(session, mac.node_id, index, mac.committed_memory_bytes, now_ms)
        for pod in fleet.pods:
            node_rows.save_pod(session, PodDeclaration(
                pod.pod_id, pod.members[0], pod.members,
                tuple(PodCable(link.a, link.b, link.kind, link.cables) for link in pod.links)), now_ms)
    return node_ids


def _running_job(session, node_id: str, index: int, memory: int, now_ms: int) -> None:  # type: ignore[no-untyped-def]
    job_id = JobId(f"job-bench{index:08d}")
    job_rows.insert_job(session, JobRecord(
        job_id=job_id, consumer_id="bench", request_id=None, model_id="llama-3.2-1b-4bit",
        prompt="(benchmark)", max_tokens=128, temperature=0.0, top_p=1.0, seed=index,
        min_decode_tokens_per_s=0.0, context_tokens=256, status=JobStatus.RUNNING,
        created_at_ms=now_ms - 5_000, attempt=1, assigned_at_ms=now_ms - 4_000))
    job_rows.add_assignments(session, job_id, 1, ((node_id, max(1, memory), 16),))


def _timed(work: Callable[[], object], repeats: int) -> list[float]:
    work()  # warm caches and the connection pool first
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1000)
    return times


def _report(name: str, times: list[float]) -> None:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    print(f"  {name:<44} p50 {statistics.median(ordered):7.2f} ms   p95 {p95:7.2f} ms   "
          f"max {ordered[-1]:7.2f} ms")


def _serve(world: World) -> tuple[str, Callable[[], None]]:
    import uvicorn
    from fastapi import FastAPI

    from coordinator.world.routes import attach_world

    app = FastAPI()
    attach_world(app, world)
    listener = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)  # bench setup only: uvicorn offers no readiness event
    port = listener.getsockname()[1]

    def stop() -> None:
        server.should_exit = True
        thread.join(10)
    return f"http://127.0.0.1:{port}", stop


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]


def _browser_figures(base: str, macs: int, repeats: int) -> None:
    """In Debian's Chromium: first rows after navigation, and a jump deep into the list."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        loads, jumps = [], []
        for attempt in range(repeats):
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            start = time.perf_counter()
            page.goto(f"{base}/world#/fleet")
            page.locator(".fleet-rows .fleet-row[aria-rowindex='2'] .name").wait_for()
            loads.append((time.perf_counter() - start) * 1000)
            target = (attempt * 977) % macs
            start = time.perf_counter()
            page.evaluate("(i) => { const s = document.querySelector('.fleet-scroll'); s.scrollTop = i * "
                          "parseFloat(getComputedStyle(document.querySelector('.fleet-table'))"
                          ".getPropertyValue('--row-height')); }", target)
            page.locator(f".fleet-rows .fleet-row[aria-rowindex='{target + 2}'] .name").wait_for()
            jumps.append((time.perf_counter() - start) * 1000)
            rows = page.locator(".fleet-rows .fleet-row").count()
            page.close()
        browser.close()
    print(f"in Chromium ({macs} Macs; each sample a fresh page):")
    _report("page load to first rows shown", loads)
    _report("scroll jump to an unfetched row, shown", jumps)
    print(f"  rows in the page's DOM: {rows} of {macs}")


def run(database_url: str, macs: int, pods: int, repeats: int, browser: bool) -> None:
    upgrade_schema(database_url)
    db = Database(database_url)
    config = CoordinatorConfig(database_url=database_url)
    service = CoordinatorService(db, SystemClock(), config)
    world = World(service, cache_ttl_s=0)  # every request reads the database: the cold cost
    now = SystemClock().now_ms()
    start = time.perf_counter()
    load_fleet(db, macs, pods, now)
    print(f"loaded {macs} Macs and {pods} pods in {time.perf_counter() - start:.1f} s ({database_url.split(':')[0]})")
    cases: dict[str, dict[str, str]] = {
        "page 1 (newest first, 50)": {},
        "page 1, 200 per page": {"page_size": "200"},
        f"deep page ({macs // 100} of {macs // 50})": {"page": str(max(1, macs // 100))},
        "status=online": {"status": "online"},
        "status=busy": {"status": "busy"},
        "chip=Apple M3 Ultra, sort=memory": {"chip": "Apple M3 Ultra", "sort": "memory"},
        "region=Asia/Tokyo, tier=pro": {"region": "Asia/Tokyo", "tier": "pro"},
        "search q=m4 max": {"q": "m4 max"},
        "sort=bandwidth, page 20": {"sort": "bandwidth", "page": "20"},
    }
    print("World.fleet_page (query + rows, in process):")
    for name, params in cases.items():
        _report(name, _timed(lambda p=params: world.fleet_page(p), repeats))
    _report("facets", _timed(world.facets, repeats))
    _report("totals", _timed(world.totals, repeats))
    _report("live feed tick (fingerprint, totals, epoch)", _timed(world.snapshot, repeats))
    cached = World(service)
    _report("page 1 again within a second (answer cache)", _timed(lambda: cached.fleet_page({}), repeats))
    cached.close()
    base, stop = _serve(world)
    try:
        print("over HTTP, uncached (uvicorn on loopback, JSON included):")
        size = len(_get(f"{base}/world/api/fleet?page_size=200"))
        for name, query in (("GET /world/api/fleet", ""), ("GET /world/api/fleet?page_size=200", "?page_size=200"),
                            ("GET /world/api/fleet?status=online&page=50", "?status=online&page=50"),
                            ("GET /world/api/totals", None)):
            url = f"{base}/world/api/totals" if query is None else f"{base}/world/api/fleet{query}"
            _report(name, _timed(lambda u=url: _get(u), repeats))
        print(f"  a 200-Mac page is {size / 1024:.0f} KiB of JSON; "
              f"{json.loads(_get(base + '/world/api/fleet'))['total']} Macs in all")
        if browser:
            _browser_figures(base, macs, min(repeats, 10))
    finally:
        world.close()
        stop()
        db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--macs", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--database-url", help="an EMPTY database (default: SQLite in a temporary directory)")
    parser.add_argument("--browser", action="store_true",
                        help="also time the web app in Debian's Chromium (/usr/bin/chromium, via Playwright)")
    args = parser.parse_args()
    if args.database_url:
        run(args.database_url, args.macs, args.pods, args.repeats, args.browser)
        return
    with tempfile.TemporaryDirectory() as directory:
        run(f"sqlite:///{Path(directory) / 'world.db'}", args.macs, args.pods, args.repeats, args.browser)


if __name__ == "__main__":
    main()
