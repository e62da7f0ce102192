"""The coordinator's metrics registry, and the few calls the service makes to record into it.

One CoordinatorMetrics per service (its own CollectorRegistry), so two coordinators in one
process, as in tests, never count into each other. Recording is in memory and takes
microseconds; the service calls it after its transactions commit, never inside them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.registry import Collector

from coordinator.metrics import names
from coordinator.metrics.timing import FinishedRequest
from coordinator.placement.decision import Placement, Unplaceable
from coordinator.placement.filters import FilterReason

disable_created_metrics()  # as vLLM: no *_created series beside every counter and histogram
MODEL = ("model_name",)
OUTCOME_PLACED = "placed"
OUTCOME_WAITING = "waiting"  # no Mac free now: the job waits in the queue
OUTCOME_REFUSED = "refused"  # no Mac in the network could ever run it


# A Mac's state now (busy, offline, owner back) never makes a refusal permanent: the job's own
# needs do. A permanent refusal filtered only by state is labelled NEVER_FITS.
_STATE_REASONS = frozenset({FilterReason.OFFLINE, FilterReason.OWNER_ACTIVE, FilterReason.BUSY})
NEVER_FITS = "never_fits"  # no Mac or pod serving the model could take it even idle


def refusal_reasons(decision: Unplaceable) -> list[str]:
    """The filter reasons that ruled candidates out, as labels, sorted."""
    explanation = decision.explanation
    reasons = {r for r, count in (*explanation.mac_filtered, *explanation.pod_filtered) if count > 0}
    if decision.permanent:
        reasons -= _STATE_REASONS
        if not reasons:
            return [NEVER_FITS]
    return sorted(str(r) for r in reasons)


class CoordinatorMetrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self.time_to_first_token = Histogram(
            names.TIME_TO_FIRST_TOKEN, "Time from a request's arrival to its first token stored.",
            MODEL, buckets=names.TTFT_BUCKETS_S, registry=registry)
        self.inter_token_latency = Histogram(
            names.INTER_TOKEN_LATENCY, "Interval between a request's tokens (its mean over the "
            "decode, observed once per interval).", MODEL, buckets=names.INTER_TOKEN_BUCKETS_S,
            registry=registry)
        self.e2e_request_latency = Histogram(
            names.E2E_REQUEST_LATENCY, "Time from a request's arrival to its end.", MODEL,
            buckets=names.REQUEST_LATENCY_BUCKETS_S, registry=registry)
        self.request_queue_time = Histogram(
            names.REQUEST_QUEUE_TIME, "Time a request waited for a Mac (arrival to assignment).",
            MODEL, buckets=names.REQUEST_LATENCY_BUCKETS_S, registry=registry)
        self.prompt_tokens = Counter(names.PROMPT_TOKENS, "Prompt tokens of finished requests.",
                                     MODEL, registry=registry)
        self.generation_tokens = Counter(
            names.GENERATION_TOKENS, "Tokens generated for finished requests.", MODEL,
            registry=registry)
        self.request_success = Counter(
            names.REQUEST_SUCCESS, "Finished requests by why they finished (stop, length, abort, "
            "error).", (*MODEL, "finished_reason"), registry=registry)
        self.placements = Counter(
            names.PLACEMENTS, "Placement decisions by outcome (placed, waiting, refused).",
            ("outcome",), registry=registry)
        self.placement_refusals = Counter(
            names.PLACEMENT_REFUSALS, "Decisions that placed nothing, once per filter reason that "
            "ruled candidates out.", ("reason", "permanent"), registry=registry)
        self.placement_filtered = Counter(
            names.PLACEMENT_FILTERED_CANDIDATES, "Candidates (Macs, pods) ruled out by placement "
            "filters, by reason.", ("kind", "reason"), registry=registry)
        self.heartbeats = Counter(names.HEARTBEATS, "Node heartbeats accepted.", registry=registry)
        self.streams_open = Gauge(names.STREAMS_OPEN, "Streams open now, by kind.", ("kind",),
                                  registry=registry)
        self.event_bus_lag = Histogram(
            names.EVENT_BUS_LAG, "Time from another coordinator publishing an event (after its "
            "commit) to its arrival here through PostgreSQL NOTIFY (wall clocks: includes skew "
            "across hosts).", buckets=names.EVENT_BUS_LAG_BUCKETS_S, registry=registry)
        self.event_bus_up = Gauge(
            names.EVENT_BUS_UP, "1 while other coordinators' events arrive (the LISTEN/NOTIFY "
            "relay works, or there is no other: SQLite); 0 while streams poll the database.",
            registry=registry)
        for kind in (names.STREAM_NODE, names.STREAM_CONSUMER):
            self.streams_open.labels(kind)  # present at 0 from the start
        for outcome in (OUTCOME_PLACED, OUTCOME_WAITING, OUTCOME_REFUSED):
            self.placements.labels(outcome)

    def request_finished(self, request: FinishedRequest) -> None:
        model = request.model_name
        self.request_success.labels(model, request.finished_reason).inc()
        self.prompt_tokens.labels(model).inc(request.prompt_tokens)
        self.generation_tokens.labels(model).inc(request.generation_tokens)
        self.e2e_request_latency.labels(model).observe(request.e2e_s)
        if request.queue_s is not None:
            self.request_queue_time.labels(model).observe(request.queue_s)
        if request.first_token_s is not None:
            self.time_to_first_token.labels(model).observe(request.first_token_s)
        if request.inter_token_s is not None:
            interval = self.inter_token_latency.labels(model)
            for _ in range(request.generation_tokens - 1):
                interval.observe(request.inter_token_s)

    def placement_decided(self, decision: Placement | Unplaceable) -> None:
        """A submit's decision: its outcome and what each filter ruled out."""
        explanation = decision.explanation
        for kind, filtered in (("mac", explanation.mac_filtered), ("pod", explanation.pod_filtered)):
            for reason, count in filtered:
                self.placement_filtered.labels(kind, str(reason)).inc(count)
        if isinstance(decision, Placement):
            self.placements.labels(OUTCOME_PLACED).inc()
            return
        self.placements.labels(OUTCOME_REFUSED if decision.permanent else OUTCOME_WAITING).inc()
        for reason in refusal_reasons(decision):
            self.placement_refusals.labels(reason, "true" if decision.permanent else "false").inc()

    def scheduling_pass(self, placed: int, refused: int) -> None:
        """A scheduler pass's queued jobs placed, and refused for good."""
        if placed:
            self.placements.labels(OUTCOME_PLACED).inc(placed)
        if refused:
            self.placements.labels(OUTCOME_REFUSED).inc(refused)

    def heartbeat(self) -> None:
        self.heartbeats.inc()

    def event_bus_arrived(self, lag_s: float) -> None:
        self.event_bus_lag.observe(lag_s)

    def event_bus_health(self, up: bool) -> None:
        self.event_bus_up.set(1 if up else 0)

    @contextlib.contextmanager
    def stream_open(self, kind: str) -> Iterator[None]:
        gauge = self.streams_open.labels(kind)
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    def watch(self, collector: Collector) -> None:
        """Add a collector read at every scrape (readings.NetworkCollector)."""
        self.registry.register(collector)

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)
