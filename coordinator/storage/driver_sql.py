"""The statements every token chunk runs, straight to the driver on SQLite.

SQLAlchemy's own work per statement (parameters, result rows, events) is several times
SQLite's on these small statements, and a node's stream runs them for every chunk,
the first one on the way to the consumer's first token. On SQLite such a statement
is compiled once and runs on the session's own connection, in its transaction; on any
other database it goes through the session as every other statement does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Executable
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session


class DriverStatement:
    """A Core statement for the hot path. Its binds and result columns must need no conversion
    (text, integers): one that would (a Boolean, say) always goes through the session instead."""

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._sqlite: tuple[str, tuple[str, ...], dict[str, Any]] | None = None
        self._sqlite_checked = False

    def rows(self, session: Session, parameters: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        """Every row, positional in the statement's column order."""
        compiled = self._for_sqlite(session)
        if compiled is None:
            return session.execute(self.statement, parameters).all()
        return _run(session, compiled, parameters).fetchall()

    def execute(self, session: Session, parameters: Mapping[str, Any]) -> int:
        """Run a write; the number of rows it matched."""
        compiled = self._for_sqlite(session)
        if compiled is None:
            return session.execute(self.statement, parameters).rowcount  # type: ignore[attr-defined]
        return _run(session, compiled, parameters).rowcount

    def _for_sqlite(self, session: Session) -> tuple[str, tuple[str, ...], dict[str, Any]] | None:
        dialect = session.get_bind().dialect
        if dialect.driver != "pysqlite":
            return None
        if not self._sqlite_checked:
            self._sqlite = _compile_for_sqlite(self.statement, dialect)
            self._sqlite_checked = True
        return self._sqlite


def _run(session: Session, compiled: tuple[str, tuple[str, ...], dict[str, Any]],
         parameters: Mapping[str, Any]) -> Any:
    sql, names, defaults = compiled
    values = [parameters[name] if name in parameters else defaults[name] for name in names]
    return session.connection().connection.driver_connection.execute(sql, values)


def _compile_for_sqlite(statement: Executable,
                        dialect: Dialect) -> tuple[str, tuple[str, ...], dict[str, Any]] | None:
    """The SQL text, its parameters' names in order, and the values bound in the statement (a LIMIT's);
    None when a bind's or a result column's type converts values, which the driver would skip."""
    compiled = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
    names = tuple(compiled.positiontup)
    if any(compiled.binds[name].type.bind_processor(dialect) is not None for name in names):
        return None
    results = getattr(statement, "selected_columns", ())  # a SELECT's columns; none for a write
    if any(column.type.result_processor(dialect, None) is not None for column in results):
        return None
    return str(compiled), names, dict(compiled.params)
