"""OpenTelemetry: a job's hops as spans in one trace across the coordinator and the node, sent
by OTLP to a collector (a real gRPC server on port 0 here), and the sink itself in memory."""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mlxnet.consumer import JobClient
from mlxnet.processes import spawn_node, start_coordinator, wait_until_registered
from mlxnet.tracing import HopSpans, job_trace_ids, parse_traceparent

WAIT_S = 120  # spans are batched every 100 ms here; this bounds a stuck test


def test_each_hop_is_a_span_from_the_previous_one_in_the_jobs_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = HopSpans(provider.get_tracer("test"), wall_minus_monotonic_ns=1_000)
    sink([(10, "job-a", "request"), (25, "job-a", "placed"), (40, "job-b", "request")])
    spans = {span.name + "/" + span.attributes["mlxnet.job_id"]: span for span in exporter.get_finished_spans()}
    parsed = parse_traceparent(sink.traceparent("job-a"))
    assert parsed is not None
    trace_id, parent_id = parsed
    placed = spans["placed/job-a"]
    assert (placed.start_time, placed.end_time) == (1_010, 1_025)
    assert placed.context.trace_id == trace_id and placed.parent.span_id == parent_id
    assert spans["request/job-a"].context.trace_id == trace_id
    assert spans["request/job-b"].context.trace_id != trace_id
    assert trace_id != job_trace_ids("job-a")[0]  # a fresh random context, not one derived from the id


def _sink() -> tuple[HopSpans, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return HopSpans(provider.get_tracer("test"), wall_minus_monotonic_ns=0), exporter


def test_the_node_traces_a_job_under_the_context_the_coordinator_sent() -> None:
    coordinator, coordinator_spans = _sink()
    node, node_spans = _sink()
    coordinator([(10, "job-a", "request"), (20, "job-a", "sent to its node")])
    header = coordinator.traceparent("job-a")
    assert node.adopt("job-a", header)
    node([(30, "job-a", "node received"), (40, "job-a", "first token")])
    sent = {span.context.trace_id for span in coordinator_spans.get_finished_spans()}
    received = {span.context.trace_id for span in node_spans.get_finished_spans()}
    assert len(sent) == 1 and received == sent
    assert {span.parent.span_id for span in node_spans.get_finished_spans()} == {parse_traceparent(header)[1]}  # type: ignore[index]


@pytest.mark.parametrize("header", ["", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "01-abc", "x" * 500,
                                    "00-" + "a" * 32 + "-" + "b" * 16 + "-01\nforged: line"])
def test_a_hostile_traceparent_is_ignored(header: str) -> None:
    node, _ = _sink()
    assert not node.adopt("job-a", header)
    assert parse_traceparent(node.traceparent("job-a")) is not None  # a fresh context instead


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, wanted: set[str]) -> None:
        self.spans: list[tuple[str, bytes, bytes, str]] = []  # service, trace id, parent id, name
        self.services: set[str] = set()
        self.wanted = wanted
        self.done = threading.Event()
        self._lock = threading.Lock()

    def Export(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802 (gRPC's name)
        with self._lock:
            for resource_spans in request.resource_spans:
                service = next(a.value.string_value for a in resource_spans.resource.attributes
                               if a.key == "service.name")
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append((service, span.trace_id, span.parent_span_id, span.name))
                        self.services.add(service)
            if self.wanted <= {name for *_, name in self.spans}:
                self.done.set()
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.mark.e2e
def test_a_jobs_spans_from_coordinator_and_node_share_its_trace(tmp_path: Path, tiny_model_dir: Path) -> None:
    collector = Collector({"sent to its node", "node received", "first token"})
    server = grpc.server(futures.ThreadPoolExecutor(4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_BSP_SCHEDULE_DELAY": "100"}
    coordinator = start_coordinator(tmp_path, database_url=f"sqlite:///{tmp_path / 'c.db'}",
                                    allow_anonymous=True, env=env)
    nodes = []
    try:
        nodes = [wait_until_registered(spawn_node(tmp_path, "mini", coordinator.extra["address"],
                                                  [f"test/tiny={tiny_model_dir}"], profile="m4-pro-64",
                                                  operator="alice", env=env,
                                                  trust=coordinator.trust))]
        with JobClient(coordinator.extra["address"], trust=coordinator.trust) as client:
            job = client.submit("test/tiny", "In the beginning", max_tokens=4)
            list(client.stream(job.job_id))
        assert collector.done.wait(WAIT_S), f"spans seen: {sorted({s[3] for s in collector.spans})}"
    finally:
        for child in [*nodes, coordinator]:
            child.stop()
        server.stop(0)
    sent = [tid for service, tid, _, name in collector.spans
             if (service, name) == ("mlxnet-coordinator", "sent to its node")]
    assert len(sent) == 1  # one job: its one trace, the coordinator's fresh context
    assert sent[0] != job_trace_ids(job.job_id)[0].to_bytes(16, "big")  # propagated, not derived
    mine = [(service, name) for service, tid, _, name in collector.spans if tid == sent[0]]
    assert ("mlxnet-coordinator", "sent to its node") in mine
    assert ("mlxnet-node", "node received") in mine and ("mlxnet-node", "first token") in mine
