"""`--log-format json`: one JSON line per event with job, node and request ids, from a formatter
test and from a real coordinator serving a real HTTP request with a real node."""

from __future__ import annotations

import json
import logging
import urllib.request
from pathlib import Path

import pytest

from contracts import log_context
from mlxnet.log_format import JsonFormatter
from mlxnet.processes import start_coordinator, start_nodes

JOB = "job-" + "ab" * 16
NODE = "node-" + "cd" * 12


def _record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("coordinator.x", logging.INFO, __file__, 1, message, args, None)
    record.__dict__.update(extra)
    return record


def test_ids_come_from_the_message_or_the_call_and_the_request_from_its_context() -> None:
    line = JsonFormatter().format(_record("job %s assigned to %s", JOB, NODE))
    event = json.loads(line)
    assert (event["job_id"], event["node_id"], event["request_id"]) == (JOB, NODE, None)
    assert event["message"] == f"job {JOB} assigned to {NODE}" and event["level"] == "INFO"
    token = log_context.request_id.set("req-1")
    try:
        event = json.loads(JsonFormatter().format(_record("no ids here", job_id="job-given")))
    finally:
        log_context.request_id.reset(token)
    assert (event["job_id"], event["node_id"], event["request_id"]) == ("job-given", None, "req-1")
    assert "\n" not in JsonFormatter().format(_record("two\nlines"))


@pytest.mark.e2e
def test_a_coordinator_logs_json_lines_with_the_http_requests_id(tmp_path: Path,
                                                                 tiny_model_dir: Path) -> None:
    coordinator = start_coordinator(tmp_path, database_url=f"sqlite:///{tmp_path / 'c.db'}",
                                    allow_anonymous=True, extra_args=("--log-format", "json"))
    nodes = []
    try:
        nodes = start_nodes(tmp_path, coordinator.extra["address"],
                            [("mini", [f"test/tiny={tiny_model_dir}"], "m4-pro-64", "alice")],
                            coordinator.trust)
        request = urllib.request.Request(
            f"{coordinator.extra['url']}/v1/completions",
            data=json.dumps({"model": "test/tiny", "prompt": "In the beginning", "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json", "X-Request-Id": "req-from-the-test"})
        with urllib.request.urlopen(request, timeout=60, context=coordinator.ssl_context()) as answer:
            assert answer.headers["X-Request-Id"] == "req-from-the-test"
            job_id = answer.headers["x-mlxnet-job-id"]
            json.loads(answer.read())
    finally:
        for child in [*nodes, coordinator]:
            child.stop()
    events = [json.loads(line) for line in coordinator.log_path.read_text().splitlines()
              if line.startswith("{")]
    assert events and all(set(e) >= {"time", "level", "logger", "message", "job_id", "node_id",
                                     "request_id"} for e in events)
    submitted = [e for e in events if e["job_id"] == job_id and "queued for model" in e["message"]]
    assert submitted and submitted[0]["request_id"] == "req-from-the-test"
    assert submitted[0]["node_id"] == nodes[0].extra["node_id"]
    registered = [e for e in events if "registered" in e["message"]]
    assert registered and registered[0]["node_id"] == nodes[0].extra["node_id"]
