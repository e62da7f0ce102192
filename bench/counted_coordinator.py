"""`mlxnet coordinator`, with every SQL statement and transaction it sends counted: for bench.scale --profile.

    python -m bench.counted_coordinator coordinator ARGS...   (the CLI's arguments)

With MLXNET_BENCH_SQL_COUNTS=DIR: creating DIR/NAME.zero zeroes the counts, creating DIR/NAME.write
writes them to DIR/NAME as JSON ({"statements": {first 90 characters of the SQL: count},
"transactions": n, "commits": n}); each request file is removed once done. Files, not signals:
the coordinator's main thread may sit in a C call that a Python signal handler waits behind.
Listeners on the Engine class see every engine the process makes, on every thread.
With MLXNET_BENCH_SQL_SITES=1 as well, each statement's callers in our packages are counted too
("sites": {statement: {caller chain: count}}), to find where a repeated read comes from; walking
the stack costs CPU, so figures from such a run are not comparable.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine

from mlxnet import cli

OUTPUT_ENV = "MLXNET_BENCH_SQL_COUNTS"
SITES_ENV = "MLXNET_BENCH_SQL_SITES"
SITE_FRAMES_MAX = 8
_OUR_PACKAGES = ("/coordinator/", "/ledger/")
STATEMENT_KEY_CHARS = 90
REQUEST_POLL_S = 0.1

_lock = threading.Lock()
_statements: collections.Counter[str] = collections.Counter()
_totals: collections.Counter[str] = collections.Counter()
_sites: collections.defaultdict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
_record_sites = os.environ.get(SITES_ENV) == "1"


def _key(statement: str) -> str:
    return " ".join(statement.split())[:STATEMENT_KEY_CHARS]


@event.listens_for(Engine, "before_cursor_execute")
def _count_statement(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
    key = _key(statement)
    site = _site() if _record_sites else None
    with _lock:
        _statements[key] += 1
        if site is not None:
            _sites[key][site] += 1


def _site() -> str:
    """The innermost SITE_FRAMES_MAX callers in our packages, innermost last."""
    frame, found = sys._getframe(2), []
    while frame is not None and len(found) < SITE_FRAMES_MAX:
        path = frame.f_code.co_filename
        if any(package in path for package in _OUR_PACKAGES):
            found.append(f"{Path(path).stem}.{frame.f_code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return " < ".join(found)


@event.listens_for(Engine, "begin")
def _count_begin(conn) -> None:  # type: ignore[no-untyped-def]
    with _lock:
        _totals["transactions"] += 1


@event.listens_for(Engine, "commit")
def _count_commit(conn) -> None:  # type: ignore[no-untyped-def]
    with _lock:
        _totals["commits"] += 1


def _serve_requests(directory: Path) -> None:
    while True:
        for request in sorted(directory.glob("*.zero")):
            with _lock:
                _statements.clear()
                _totals.clear()
                _sites.clear()
            request.unlink()
        for request in sorted(directory.glob("*.write")):
            with _lock:
                counts = {"statements": dict(_statements.most_common()), **_totals,
                          **({"sites": {key: dict(found.most_common()) for key, found in _sites.items()}}
                             if _record_sites else {})}
            request.with_suffix("").write_text(json.dumps(counts, indent=1))
            request.unlink()
        time.sleep(REQUEST_POLL_S)


if __name__ == "__main__":
    threading.Thread(target=_serve_requests, args=(Path(os.environ[OUTPUT_ENV]),), daemon=True,
                     name="sql-counts").start()
    sys.exit(cli.main())
