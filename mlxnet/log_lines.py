"""Log lines nobody can forge: every record's message is escaped and cut to one bounded line.

A value from a request (a chip name with a newline in it, a 4 MB model id) can reach a
log message by many roads; this filter, on the process's handlers, closes them all at
once, below whatever each call site already does (contracts.limits.shown).
"""

from __future__ import annotations

import logging

from contracts.limits import LOG_LINE_CHARS_MAX, shown


class OneLineRecords(logging.Filter):
    """Format each record's message now, escape what is not printable, and truncate it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "one_line", False):  # once, however many handlers see it
            record.msg, record.args = shown(record.getMessage(), LOG_LINE_CHARS_MAX), None
            record.one_line = True
        return True


def install(handlers: list[logging.Handler] | None = None) -> None:
    """Put the filter on the given handlers (by default the root logger's)."""
    for handler in handlers if handlers is not None else logging.getLogger().handlers:
        if not any(isinstance(f, OneLineRecords) for f in handler.filters):
            handler.addFilter(OneLineRecords())
