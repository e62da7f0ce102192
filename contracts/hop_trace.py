"""Where a job's first token spends its time, hop by hop, across the gateway, coordinator and node.

Off unless the environment names a file in MLXNET_HOP_TRACE when the process starts;
then each hop appends one line, `<CLOCK_MONOTONIC ns> <job id> <hop>`. That clock is
one clock for every process on a machine, so the lines of the three processes line up
(bench/first_token_hops.py reads them). Off, a hop costs one global read.

Hops taken before a job has its id (the HTTP request, the submit's first steps) wait in
the request's context and are written with the id once it is bound; contextvars follow a
request onto the worker thread that runs its submit.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable
from typing import TextIO

ENVIRONMENT_VARIABLE = "MLXNET_HOP_TRACE"

_file: TextIO | None = None
_lock = threading.Lock()
# Also given every hop when set, file or not: OpenTelemetry spans (mlxnet/tracing.py).
_sink: Callable[[list[tuple[int, str, str]]], None] | None = None
# Hops of the current request before its job id is known: (ns, hop) in order.
_pending: contextvars.ContextVar[list[tuple[int, str]] | None] = contextvars.ContextVar("hop_trace_pending",
                                                                                        default=None)


def open_from_environment() -> None:
    """Start tracing when MLXNET_HOP_TRACE names a file (appended to, line-buffered)."""
    global _file
    path = os.environ.get(ENVIRONMENT_VARIABLE)
    if path and _file is None:
        _file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (lives as long as the process)


def set_sink(sink: Callable[[list[tuple[int, str, str]]], None] | None) -> None:
    """Hand every hop, as (monotonic ns, job id, hop), to sink too; None stops it."""
    global _sink
    _sink = sink


def enabled() -> bool:
    return _file is not None or _sink is not None


def begin_request() -> None:
    """A request starts in this context: its hops wait for bind()."""
    if _file is not None or _sink is not None:
        _pending.set([(time.monotonic_ns(), "request")])


def hop(name: str) -> None:
    """A hop of the current request, before its job id is known."""
    if _file is not None or _sink is not None:
        pending = _pending.get()
        if pending is not None:
            pending.append((time.monotonic_ns(), name))


def bind(job_id: str) -> None:
    """The current request's job: write the hops it waited with, under that id."""
    if _file is not None or _sink is not None:
        pending = _pending.get()
        if pending:
            _write([(ns, job_id, name) for ns, name in pending])
            pending.clear()


def job_hop(job_id: str, name: str, at_ns: int | None = None) -> None:
    """A hop of a job whose id is known here (at_ns: when it happened, if not now)."""
    if _file is not None or _sink is not None:
        _write([(time.monotonic_ns() if at_ns is None else at_ns, job_id, name)])


def traceparent(job_id: str) -> str:
    """The job's trace context as a W3C traceparent to send with it ("" when nothing traces)."""
    source = getattr(_sink, "traceparent", None)
    return source(job_id) if source is not None else ""


def adopt(job_id: str, header: str) -> None:
    """Trace the job's hops here under the context a traceparent brought (ignored if invalid)."""
    take = getattr(_sink, "adopt", None)
    if take is not None and header:
        take(job_id, header)


def _write(lines: list[tuple[int, str, str]]) -> None:
    # A job id comes from a node's message too: one with a space or a line break would break the line.
    lines = [(ns, job_id, name) for ns, job_id, name in lines
             if job_id and len(job_id.split()) == 1 and job_id.isprintable()]
    if _sink is not None:
        _sink(lines)
    if _file is not None:
        text = "".join(f"{ns} {job_id} {name}\n" for ns, job_id, name in lines)
        with _lock:
            _file.write(text)


def read(path: str) -> dict[str, list[tuple[int, str]]]:
    """The trace file's hops by job id, each job's in the order of the clock."""
    jobs: dict[str, list[tuple[int, str]]] = {}
    with open(path, encoding="utf-8") as file:
        for line in file:
            ns, job_id, name = line.rstrip("\n").split(" ", 2)
            jobs.setdefault(job_id, []).append((int(ns), name))
    for hops in jobs.values():
        hops.sort()
    return jobs
