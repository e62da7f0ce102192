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
from mlxnet.tracing import HopSpans, job_trace_ids

WAIT_S = 120  # spans are batched every 100 ms here; this bounds a stuck test


def test_each_hop_is_a_span_from_the_previous_one_in_the_jobs_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = HopSpans(provider.get_tracer("test"), wall_minus_monotonic_ns=1_000)
    sink([(10, "job-a", "request"), (25, "job-a", "placed"), (40, "job-b", "request")])
    spans = {span.name + "/" + span.attributes["mlxnet.job_id"]: span for span in exporter.get_finished_spans()}
    trace_id, parent_id = job_trace_ids("job-a")
    placed = spans["placed/job-a"]
    assert (placed.start_time, placed.end_time) == (1_010, 1_025)
    assert placed.context.trace_id == trace_id and placed.parent.span_id == parent_id
    assert spans["request/job-b"].context.trace_id == job_trace_ids("job-b")[0] != trace_id


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
    trace_id, parent_id = job_trace_ids(job.job_id)
    mine = [(service, name) for service, tid, pid, name in collector.spans
            if tid == trace_id.to_bytes(16, "big") and pid == parent_id.to_bytes(8, "big")]
    assert ("mlxnet-coordinator", "sent to its node") in mine
    assert ("mlxnet-node", "node received") in mine and ("mlxnet-node", "first token") in mine
