"""A planted check's sources, read beside every check, as answered checks pile up (PostgreSQL).

    .venv/bin/python -m bench.planting_sources [--checks 200000]

A fresh PostgreSQL database (MLXNET_TEST_POSTGRES_URL, else the local `test` server) at the
newest schema gets `--checks` peer checks, nine in ten answered and passed; then peer_store.planting_sources (the latest 50) is timed with the answered-checks index
(0021_plant_answered_index) and again without it, which sorts every answered check.
"""

from __future__ import annotations

import argparse
import time

from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from coordinator.storage.database import upgrade_schema
from coordinator.verification import peer_store
from bench.scale import fresh_database

READS = 20
SOURCES = 50


def _fill(url: str, checks: int) -> None:
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text(
            "insert into peer_checks (check_id, job_id, role, attempt, checked_node_id, checked_operator_id,"
            " checker_node_id, checker_operator_id, status, created_at_ms, answered_at_ms, passed, fee_base_units)"
            " select 'c' || g, 'j' || g, 'check', 1, 'n' || (g % 1000), 'o' || (g % 1000), 'm' || (g % 997),"
            " 'p' || (g % 997), case when g % 10 = 0 then 'waiting' else 'answered' end, g, g, true, 10"
            " from generate_series(1, :checks) g"), {"checks": checks})
        connection.execute(text("analyze peer_checks"))
    engine.dispose()


def _median_read_ms(url: str) -> float:
    engine = create_engine(url)
    times = []
    with Session(engine) as session:
        for _ in range(READS):
            start = time.perf_counter()
            peer_store.planting_sources(session, SOURCES)
            times.append((time.perf_counter() - start) * 1e3)
    engine.dispose()
    return sorted(times)[READS // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=200_000)
    args = parser.parse_args()
    with fresh_database() as (url, _):
        upgrade_schema(url)
        _fill(url, args.checks)
        indexed = _median_read_ms(url)
        engine = create_engine(url)
        with engine.begin() as connection:
            connection.execute(text("drop index ix_peer_checks_answered"))
        engine.dispose()
        unindexed = _median_read_ms(url)
    print(f"{args.checks:,} peer checks: planting_sources (latest {SOURCES}) median {indexed:.2f} ms with the "
          f"answered-checks index, {unindexed:.2f} ms without")


if __name__ == "__main__":
    main()
