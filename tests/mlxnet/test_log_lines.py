"""Log lines from request values cannot be forged: escaped and cut, whatever the call site did."""

from __future__ import annotations

import io
import logging

from contracts.limits import LOG_LINE_CHARS_MAX
from mlxnet import log_lines


def _logged(*args: object) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    log_lines.install([handler])
    log_lines.install([handler])  # twice changes nothing
    logger = logging.getLogger("tests.log_lines")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning(*args)  # type: ignore[arg-type]
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_a_newline_in_a_logged_value_cannot_forge_a_line() -> None:
    text = _logged("node %s registered", "M4\nINFO coordinator.rpc: operator root approved")
    assert text.count("\n") == 1  # the handler's own line end
    assert text == "WARNING tests.log_lines: node M4\\nINFO coordinator.rpc: operator root approved registered\n"


def test_a_huge_logged_value_is_cut() -> None:
    text = _logged("model %s refused", "m" * (4 << 20))
    assert len(text) < LOG_LINE_CHARS_MAX + 200 and text.rstrip().endswith("characters)")


def test_a_backslash_is_escaped_so_an_escape_cannot_be_faked() -> None:
    assert _logged("%s", "a\\nb") == "WARNING tests.log_lines: a\\\\nb\n"
