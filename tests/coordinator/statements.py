"""The SQL an engine runs, seen through SQLAlchemy's own events: what a test asserts on, no patch needed."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator

from sqlalchemy import Engine, event

# A SELECT of node columns from the nodes table alone, with no WHERE: every node there is.
_WHOLE_FLEET = re.compile(r"SELECT nodes\.\w+(?:, nodes\.\w+)* FROM nodes(?: ORDER BY [\w.]+(?: ASC| DESC)?)?")


@contextlib.contextmanager
def statements_run(engine: Engine) -> Iterator[list[str]]:
    """Every statement the engine sends to its driver while the block runs, from any thread."""
    seen: list[str] = []

    def note(_connection, _cursor, statement, _parameters, _context, _executemany) -> None:  # type: ignore[no-untyped-def]
        seen.append(" ".join(statement.split()))

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


def whole_fleet_reads(statements: Iterable[str]) -> list[str]:
    return [statement for statement in statements if _WHOLE_FLEET.fullmatch(statement)]
