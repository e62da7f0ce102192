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
    """A Core statement whose binds need no conversion (text and integers), for the hot path."""

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._sqlite: tuple[str, tuple[str, ...], dict[str, Any]] | None = None

    def rows(self, session: Session, parameters: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        """Every row, positional in the statement's column order."""
        dialect = session.get_bind().dialect
        if dialect.driver != "pysqlite":
            return session.execute(self.statement, parameters).all()
        return self._run_on_sqlite(session, dialect, parameters).fetchall()

    def execute(self, session: Session, parameters: Mapping[str, Any]) -> None:
        dialect = session.get_bind().dialect
        if dialect.driver != "pysqlite":
            session.execute(self.statement, parameters)
        else:
            self._run_on_sqlite(session, dialect, parameters)

    def _run_on_sqlite(self, session: Session, dialect: Dialect, parameters: Mapping[str, Any]) -> Any:
        if self._sqlite is None:
            self._sqlite = _compile_for_sqlite(self.statement, dialect)
        sql, names, defaults = self._sqlite
        values = [parameters[name] if name in parameters else defaults[name] for name in names]
        return session.connection().connection.driver_connection.execute(sql, values)


def _compile_for_sqlite(statement: Executable, dialect: Dialect) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """The SQL text, its parameters' names in order, and the values bound in the statement (a LIMIT's)."""
    compiled = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
    names = tuple(compiled.positiontup)
    for name in names:
        bind_type = compiled.binds[name].type
        # The driver gets each value as given: a type that converts values would be skipped.
        assert bind_type.bind_processor(dialect) is None, f"{name} ({bind_type}) needs conversion"
    return str(compiled), names, dict(compiled.params)
