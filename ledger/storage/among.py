"""`column` is one of a set of text ids, the set sent as one JSON list parameter.

One parameter, so a statement's text never changes with the set's size: the database
parses and plans it once, and a set of any size fits (no driver parameter limit). Each
database compiles it with its own JSON function, as it compiles any other expression:
SQLite reads the list with json_each; PostgreSQL turns it into an array first, so an
index answers `= ANY(...)` (also on each side of an OR) instead of a scan.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import BindParameter, Boolean, ColumnElement, String, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.visitors import InternalTraversal


class Among(ColumnElement[bool]):
    """True when the column's value is in the JSON list bound to the parameter `name`."""

    type = Boolean()
    inherit_cache = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement),
                           ("parameter", InternalTraversal.dp_clauseelement)]

    def __init__(self, column: ColumnElement[Any], name: str) -> None:
        self.column = column
        self.parameter: BindParameter[str] = bindparam(name, type_=String)


def among(column: ColumnElement[Any], name: str = "among") -> Among:
    return Among(column, name)


def json_ids(values: Iterable[object]) -> str:
    """The parameter's value: the distinct text values, sorted, as one JSON list."""
    return json.dumps(sorted({value for value in values if isinstance(value, str)}))


@compiles(Among)
def _compile_json_each(element: Among, compiler: Any, **kw: Any) -> str:
    column, parameter = compiler.process(element.column, **kw), compiler.process(element.parameter, **kw)
    return f"{column} IN (SELECT value FROM json_each({parameter}))"


@compiles(Among, "postgresql")
def _compile_any_array(element: Among, compiler: Any, **kw: Any) -> str:
    column, parameter = compiler.process(element.column, **kw), compiler.process(element.parameter, **kw)
    return f"{column} = ANY(ARRAY(SELECT json_array_elements_text(CAST({parameter} AS json))))"
