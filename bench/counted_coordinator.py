"""`mlxnet coordinator`, with every SQL statement and transaction it sends counted: for bench.scale --profile.

    python -m bench.counted_coordinator coordinator ARGS...   (the CLI's arguments)

With MLXNET_BENCH_SQL_COUNTS=DIR: creating DIR/NAME.zero zeroes the counts, creating DIR/NAME.write
writes them to DIR/NAME as JSON ({"statements": {first 90 characters of the SQL: count},
"transactions": n, "commits": n}); each request file is removed once done. Files, not signals:
the coordinator's main thread may sit in a C call that a Python signal handler waits behind.
Listeners on the Engine class see every engine the process makes, on every thread.
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
STATEMENT_KEY_CHARS = 90
REQUEST_POLL_S = 0.1

_lock = threading.Lock()
_statements: collections.Counter[str] = collections.Counter()
_totals: collections.Counter[str] = collections.Counter()


def _key(statement: str) -> str:
    return " ".join(statement.split())[:STATEMENT_KEY_CHARS]


@event.listens_for(Engine, "before_cursor_execute")
def _count_statement(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
    with _lock:
        _statements[_key(statement)] += 1


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
            request.unlink()
        for request in sorted(directory.glob("*.write")):
            with _lock:
                counts = {"statements": dict(_statements.most_common()), **_totals}
            request.with_suffix("").write_text(json.dumps(counts, indent=1))
            request.unlink()
        time.sleep(REQUEST_POLL_S)


if __name__ == "__main__":
    threading.Thread(target=_serve_requests, args=(Path(os.environ[OUTPUT_ENV]),), daemon=True,
                     name="sql-counts").start()
    sys.exit(cli.main())
