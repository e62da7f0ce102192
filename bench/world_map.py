"""MLX World's map with 10,000 Macs in Chromium: first paint and frame rate.

    .venv/bin/python -m bench.world_map [--macs 10000 --pods 200 --repeats 5 --frames 180]
                                        [--screenshot artifacts/world/map-10000.png]

Loads bench.world's simulated fleet into a fresh SQLite database, publishes a place for every
Mac (a city from coordinator/world/places.txt, chosen at random with a fixed seed), serves MLX
World on loopback and opens it in Debian's Chromium (/usr/bin/chromium, via Playwright) at
1280x800. Prints: the /world/api/map answer's size and time; first paint (navigation to the
map's first frame with every Mac drawn), p50 and max over fresh pages; while panning, frames
per second (the browser's rAF rate caps it) with each frame's mean and worst draw time, over
the whole world (Macs clustered) and zoomed in 8x; and the time from a new Mac's registration
(with a region of its own) to its point on the open map, over --joins Macs (target 2 s). The
scheduler's index is built before the joins, as a running coordinator's is.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import delete, insert, update

from bench.world import CHROMIUM_ARGS, _get, _serve, load_fleet
from coordinator.clock import SystemClock
from coordinator.config import CoordinatorConfig
from coordinator.service import CoordinatorService
from coordinator.storage.database import Database, upgrade_schema
from coordinator.storage.tables import nodes
from coordinator.world.places import PLACES_FILE
from coordinator.world.tables import node_regions
from coordinator.world.world import World


def _publish_places(db: Database, node_ids: list[str], now_ms: int, seed: int = 3) -> None:
    zones = [line.split("\t")[0] for line in PLACES_FILE.read_text().splitlines()
             if line and not line.startswith("#")]
    rng = random.Random(seed)
    with db.transaction() as session:
        session.execute(delete(node_regions))
        session.execute(insert(node_regions), [
            {"node_id": node_id, "region": rng.choice(zones), "updated_at_ms": now_ms} for node_id in node_ids])
        # Loading took a while: every Mac heartbeats once more, so the map shows live states.
        session.execute(update(nodes).where(nodes.c.left_at_ms.is_(None)).values(last_heartbeat_ms=now_ms))


JOIN_WAIT_MS = 60_000
FLEET_ONLINE_MS = 3_600_000


def _join(service: CoordinatorService, work: Path, number: int) -> str:
    """Register a new Mac as its node agent would, publishing a region; returns its id."""
    from node_agent.coordinator_client import register_request
    from node_agent.hardware.profiles import simulated_profile
    from node_agent.identity import load_or_create_identity
    from contracts.models import ModelSpec
    from coordinator.rpc.convert import registration_from_pb

    model = ModelSpec(model_id="bench/joiner-model", weights_bytes=10_000_000, parameter_count=2_500_000,
                      num_layers=4, num_attention_heads=4, num_kv_heads=2, head_dim=32,
                      max_context_tokens=2048, weights_digest="ab" * 32, vocab_size=256)

    identity = load_or_create_identity(work / f"joiner-{number}.pem")
    nonce, _ = service.nodes.challenge(identity.public_key_raw)
    request = register_request(identity, nonce, simulated_profile("m4-max-128"), (model,), "",
                               f"joiner-{number}", 1, region="Europe/Lisbon")
    node_id, _ = service.nodes.register(registration_from_pb(request))
    return node_id


def _join_figures(page, service: CoordinatorService, joins: int) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    """Seconds from each new Mac's registration to its point on the open map, and of each the
    registration call's own (its scheduling pass included, as the gRPC call has it)."""
    import coordinator.rpc.convert, node_agent.coordinator_client, node_agent.identity  # noqa: F401
    # (imported before the clock starts: a node agent's process has them loaded already)
    seconds, registering = [], []
    with tempfile.TemporaryDirectory() as directory:
        for number in range(joins):
            # The coordinator's scheduler loop keeps its index current (and rebuilds it when due)
            # between joins; a join that met a due rebuild would time that instead.
            service.run_scheduler()
            start = time.perf_counter()
            node_id = _join(service, Path(directory), number)
            registering.append(time.perf_counter() - start)
            page.wait_for_function("(id) => window.__mlxWorldMap.positionOf(id) !== null", arg=node_id,
                                   timeout=JOIN_WAIT_MS, polling="raf")
            seconds.append(time.perf_counter() - start)
    return seconds, registering


def _browser_figures(base: str, macs: int, repeats: int, frames: int, screenshot: Path | None,
                     service: CoordinatorService, joins: int) -> None:
    from playwright.sync_api import sync_playwright

    first_paints = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for _ in range(repeats):
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            start = time.perf_counter()
            page.goto(f"{base}/world#/fleet")
            page.wait_for_function("() => window.__mlxWorldMap && window.__mlxWorldMap.drawn.length > 0",
                                   timeout=120_000)
            first_paints.append((time.perf_counter() - start) * 1000)
            shown = int(page.locator(".map-canvas").get_attribute("data-shown") or 0)
            page.close()
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{base}/world#/fleet")
        page.wait_for_function("() => window.__mlxWorldMap && window.__mlxWorldMap.drawn.length > 0",
                               timeout=120_000)
        whole = page.evaluate("(n) => window.__mlxWorldMap.measureFrames(n, 1)", frames)
        zoomed = page.evaluate("(n) => window.__mlxWorldMap.measureFrames(n, 8)", frames)
        page.evaluate("() => { window.__mlxWorldMap.resetView(); window.__mlxWorldMap.draw(); }")
        joined, registering = _join_figures(page, service, joins)
        if screenshot is not None:
            page.evaluate("() => { window.__mlxWorldMap.resetView(); window.__mlxWorldMap.draw(); }")
            page.screenshot(path=str(screenshot))
        browser.close()
    print(f"in Chromium, 1280x800 ({shown} of {macs} Macs on the map):")
    print(f"  first paint (navigation to the map drawn): p50 {statistics.median(first_paints):.0f} ms, "
          f"max {max(first_paints):.0f} ms over {repeats} fresh pages")
    for name, figures in (("whole world", whole), ("zoomed 8x", zoomed)):
        print(f"  panning, {name}: {figures['fps']:.1f} frames/s; draw {figures['drawMs']:.2f} ms mean, "
              f"{figures['worstMs']:.2f} ms worst ({frames} frames)")
    print(f"  a new Mac on the open map: p50 {statistics.median(joined):.2f} s, max {max(joined):.2f} s "
          f"over {joins} joins (target 2 s); each: {', '.join(f'{s:.2f}' for s in joined)} s, "
          f"of which registering: {', '.join(f'{s:.2f}' for s in registering)} s")


def run(database_url: str, macs: int, pods: int, repeats: int, frames: int,
        screenshot: Path | None = None, joins: int = 5) -> None:
    upgrade_schema(database_url)
    db = Database(database_url)
    # The simulated Macs send no heartbeats: they count as online for the whole run, as a live
    # network's heartbeating Macs do, so no scheduling pass re-reads 10,000 lapsed leases.
    service = CoordinatorService(db, SystemClock(), CoordinatorConfig(database_url=database_url,
                                                                      node_offline_after_ms=FLEET_ONLINE_MS))
    now = SystemClock().now_ms()
    node_ids = load_fleet(db, macs, pods, now)
    _publish_places(db, node_ids, SystemClock().now_ms())
    # A running coordinator built its placement index at its first pass; the joins below must
    # not pay that one-off cost (it is printed apart).
    start = time.perf_counter()
    service.run_scheduler()
    print(f"setup: the scheduler's first pass over {macs} Macs took {time.perf_counter() - start:.2f} s")
    world = World(service, cache_ttl_s=0)
    base, stop = _serve(world)
    try:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            size = len(_get(f"{base}/world/api/map"))
            times.append((time.perf_counter() - start) * 1000)
        print(f"{macs} Macs, {pods} pods: GET /world/api/map {size / 1024:.0f} KiB, "
              f"p50 {statistics.median(times):.0f} ms, max {max(times):.0f} ms (uncached)")
        _browser_figures(base, macs, repeats, frames, screenshot, service, joins)
    finally:
        world.close()
        stop()
        db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--macs", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--frames", type=int, default=180)
    parser.add_argument("--joins", type=int, default=5, help="new Macs timed onto the open map")
    parser.add_argument("--screenshot", type=Path, help="save the whole-world map here (PNG)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        run(f"sqlite:///{Path(directory) / 'world.db'}", args.macs, args.pods, args.repeats, args.frames,
            args.screenshot, args.joins)


if __name__ == "__main__":
    main()
