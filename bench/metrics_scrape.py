"""/metrics at 10,000 Macs: scrape time, and the coordinator's CPU per scrape.

    .venv/bin/python -m bench.metrics_scrape [--macs 10000 --pods 200 --repeats 50 --models 8]
                                             [--database-url postgresql+psycopg://.../EMPTY_DB]

Loads bench.world's simulated fleet (Macs, pods, regions, running jobs) into a fresh database
(SQLite in a temporary directory unless --database-url names an empty one), records finished
requests for --models models so every request histogram has series, then scrapes: in process
(the exposition alone) and over HTTP from the coordinator's real gateway on loopback. Prints
p50/p95/max wall milliseconds and the process's CPU milliseconds per scrape (all its threads:
the gateway's, the database driver's and this client's), and the size of one scrape.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from bench.world import load_fleet
from coordinator.clock import SystemClock
from coordinator.config import CoordinatorConfig
from coordinator.gateway.server import start_gateway
from coordinator.metrics.timing import FinishedRequest
from coordinator.service import CoordinatorService
from coordinator.storage.database import Database, upgrade_schema


def _timed(work: Callable[[], object], repeats: int) -> tuple[list[float], float]:
    """Wall milliseconds of each call, and the process's CPU milliseconds per call."""
    work()  # warm
    walls = []
    cpu_start = time.process_time()
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        walls.append((time.perf_counter() - start) * 1000)
    return walls, (time.process_time() - cpu_start) * 1000 / repeats


def _report(name: str, walls: list[float], cpu_ms: float) -> None:
    ordered = sorted(walls)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    print(f"  {name:44s} p50 {statistics.median(ordered):7.2f} ms  p95 {p95:7.2f} ms  "
          f"max {ordered[-1]:7.2f} ms  CPU {cpu_ms:6.2f} ms/scrape")


def run(database_url: str, macs: int, pods: int, repeats: int, models: int) -> None:
    upgrade_schema(database_url)
    db = Database(database_url)
    service = CoordinatorService(db, SystemClock(), CoordinatorConfig(database_url=database_url))
    load_fleet(db, macs, pods, SystemClock().now_ms())
    for index in range(models * 50):
        service.core.metrics.request_finished(FinishedRequest(
            model_name=f"bench/model-{index % models}", finished_reason=("stop", "length")[index % 2],
            prompt_tokens=100, generation_tokens=64, queue_s=0.01 * (index % 7),
            first_token_s=0.05 * (index % 11), e2e_s=1.0 + index % 13, inter_token_s=0.02))
    print(f"{macs} Macs, {pods} pods, {models} models ({database_url.split(':')[0]}):")
    _report("network reading (SQL only)", *_timed(service.core.read_network, repeats))
    _report("exposition in process (SQL + text)", *_timed(service.core.metrics.exposition, repeats))
    gateway = start_gateway(service, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{gateway.port}/metrics"

    def scrape() -> bytes:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.read()

    try:
        size = len(scrape())
        _report("GET /metrics over HTTP", *_timed(scrape, repeats))
        print(f"  one scrape is {size / 1024:.1f} KiB of text")
    finally:
        gateway.stop()
        db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--macs", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--database-url", help="an EMPTY database (default: SQLite in a temporary directory)")
    args = parser.parse_args()
    if args.database_url:
        run(args.database_url, args.macs, args.pods, args.repeats, args.models)
        return
    with tempfile.TemporaryDirectory() as directory:
        run(f"sqlite:///{Path(directory) / 'metrics.db'}", args.macs, args.pods, args.repeats, args.models)


if __name__ == "__main__":
    main()
