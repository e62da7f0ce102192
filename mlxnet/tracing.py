"""OpenTelemetry spans for a job's hops, exported by OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.

The hops are contracts.hop_trace's (request, key check, placement, commit, sent to its node, the
node's receipt of the job, prefill, first token, first chunk stored, ...): each becomes a span
from the job's previous hop in this process to this one, under the job's context. The process
that first sees a job gives it a fresh random context (trace id and parent span id); the
coordinator sends it to the node as a W3C traceparent with the assignment
(ReceiveAssignmentsResponse.traceparent), and the node adopts it, so the coordinator's and the
node's spans land in one trace. The parent (the job) is never exported itself: a tracing UI
shows the hops as one trace under it.

Standard OTEL_* variables apply (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_BSP_SCHEDULE_DELAY, ...).
Needs the `otel` extra (`pip install -e '.[otel]'`); without it the coordinator and node warn
and run untraced.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import re
import secrets
import threading
import time
from typing import Any

from contracts import hop_trace

log = logging.getLogger(__name__)

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
JOBS_TRACKED_MAX = 10_000  # jobs whose last hop this process remembers; the oldest are forgotten
_provider: Any = None


# W3C Trace Context: version 00, trace id, parent span id, flags; all-zero ids are invalid.
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def job_trace_ids(job_id: str) -> tuple[int, int]:
    """(trace id, parent span id) derived from a job id: the old scheme, kept for reading old traces."""
    digest = hashlib.sha256(b"mlxnet.trace.v1\0" + job_id.encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def format_traceparent(trace_id: int, span_id: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def parse_traceparent(header: str) -> tuple[int, int] | None:
    """(trace id, parent span id) of a W3C traceparent, or None when it is not a valid one."""
    found = _TRACEPARENT.fullmatch(header.strip().lower()) if len(header) <= 64 else None
    if found is None:
        return None
    trace_id, span_id = int(found.group(1), 16), int(found.group(2), 16)
    return (trace_id, span_id) if trace_id and span_id else None


class HopSpans:
    """hop_trace's sink: each hop a span from the job's previous hop here, in the job's trace."""

    def __init__(self, tracer: Any, wall_minus_monotonic_ns: int) -> None:
        self._tracer = tracer
        self._offset_ns = wall_minus_monotonic_ns
        self._last_ns: collections.OrderedDict[str, int] = collections.OrderedDict()
        # job id -> (trace id, parent span id): fresh here, or adopted from a traceparent
        self._contexts: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def _context(self, job_id: str) -> tuple[int, int]:
        with self._lock:
            context = self._contexts.get(job_id)
            if context is None:
                context = self._contexts[job_id] = (secrets.randbits(128) or 1, secrets.randbits(64) or 1)
                while len(self._contexts) > JOBS_TRACKED_MAX:
                    self._contexts.popitem(last=False)
            return context

    def traceparent(self, job_id: str) -> str:
        """The job's context as a W3C traceparent, to send with it (a fresh one if it has none)."""
        return format_traceparent(*self._context(job_id))

    def adopt(self, job_id: str, traceparent: str) -> bool:
        """Trace the job's hops here under the context another process sent; False if invalid."""
        parsed = parse_traceparent(traceparent)
        if parsed is None:
            return False
        with self._lock:
            self._contexts[job_id] = parsed
            while len(self._contexts) > JOBS_TRACKED_MAX:
                self._contexts.popitem(last=False)
        return True

    def __call__(self, lines: list[tuple[int, str, str]]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        for ns, job_id, name in lines:
            with self._lock:
                start_ns = self._last_ns.pop(job_id, ns)
                self._last_ns[job_id] = ns
                while len(self._last_ns) > JOBS_TRACKED_MAX:
                    self._last_ns.popitem(last=False)
            trace_id, parent_id = self._context(job_id)
            parent = SpanContext(trace_id, parent_id, is_remote=True,
                                 trace_flags=TraceFlags(TraceFlags.SAMPLED))
            span = self._tracer.start_span(
                name, context=trace.set_span_in_context(NonRecordingSpan(parent)),
                start_time=min(start_ns, ns) + self._offset_ns, attributes={"mlxnet.job_id": job_id})
            span.end(end_time=ns + self._offset_ns)


def start_from_environment(service_name: str) -> bool:
    """Export hop spans by OTLP (gRPC) when OTEL_EXPORTER_OTLP_ENDPOINT is set; True if it does."""
    global _provider
    if not os.environ.get(ENDPOINT_VARIABLE) or _provider is not None:
        return False
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("%s is set but OpenTelemetry is not installed (pip install -e '.[otel]'); "
                    "running without traces", ENDPOINT_VARIABLE)
        return False
    _provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    hop_trace.set_sink(HopSpans(_provider.get_tracer("mlxnet"), time.time_ns() - time.monotonic_ns()))
    log.info("tracing: job hops exported by OTLP to %s", os.environ[ENDPOINT_VARIABLE])
    return True


def flush(timeout_ms: int = 5_000) -> None:
    """Send the spans still batched (before a process exits without running atexit)."""
    if _provider is not None:
        _provider.force_flush(timeout_ms)
