"""Scrape a real coordinator's /metrics after real jobs on a real node, and check the counts
against what those jobs' own records say."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mlxnet.consumer import JobClient, JobRequestError, StreamedTokens
from mlxnet.processes import Child, start_coordinator, start_nodes
from protos.mlxnet.v1 import common_pb2, job_pb2, job_pb2_grpc
from protos.wire.channel import open_channel
from tests.conftest import fresh_postgres_database

pytestmark = pytest.mark.e2e
MODEL_ID = "test/tiny-llama"
PROMPTS = ("In the beginning", "And Noah", "And the LORD said unto Abram")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def network(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            tiny_model_dir: Path) -> Iterator[tuple[Child, list[Child]]]:
    tmp_path = tmp_path_factory.mktemp(f"metrics-{request.param}")
    with contextlib.ExitStack() as stack:
        url = (f"sqlite:///{tmp_path / 'coordinator.db'}" if request.param == "sqlite"
               else stack.enter_context(fresh_postgres_database()))
        coordinator = start_coordinator(tmp_path, database_url=url, heartbeat_interval_ms=500,
                                        allow_anonymous=True)
        stack.callback(coordinator.stop)
        nodes = start_nodes(tmp_path, coordinator.extra["address"],
                            [("mini", [f"{MODEL_ID}={tiny_model_dir}"], "m4-pro-64", "alice")],
                            coordinator.trust)
        for node in nodes:
            stack.callback(node.stop)
        yield coordinator, nodes


def scrape(coordinator: Child) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, by name and sorted labels."""
    with urllib.request.urlopen(f"{coordinator.extra['url']}/metrics", timeout=30,
                                context=coordinator.ssl_context()) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _run_to_end(coordinator: Child, prompt: str, max_tokens: int, cancel_after_first: bool = False
                ) -> tuple[job_pb2.Job, int]:
    """The job's final record, and the tokens it streamed (read again from the start)."""
    with JobClient(coordinator.extra["address"], trust=coordinator.trust) as client:
        job = client.submit(MODEL_ID, prompt, max_tokens=max_tokens)
        for item in client.stream(job.job_id):
            if cancel_after_first and isinstance(item, StreamedTokens):
                with contextlib.suppress(JobRequestError):  # it may have completed meanwhile
                    client.cancel(job.job_id)
                break
        streamed, final = 0, None
        for item in client.stream(job.job_id):
            if isinstance(item, StreamedTokens):
                streamed += len(item.token_ids)
            else:
                final = item
    assert final is not None
    return final, streamed


def _finished_reason(job: job_pb2.Job, max_tokens: int) -> str:
    if job.status == job_pb2.JOB_STATUS_COMPLETED:
        return "length" if job.completion_tokens >= max_tokens else "stop"
    return {"stop_sequence": "stop", "cancelled": "abort"}.get(job.error_code, "error")


def test_request_metrics_count_the_jobs_run(network: tuple[Child, list[Child]]) -> None:
    coordinator, _ = network
    before = scrape(coordinator)
    runs = [(_run_to_end(coordinator, p, 12), 12) for p in PROMPTS]
    runs.append((_run_to_end(coordinator, "And God said", 200, cancel_after_first=True), 200))
    after = scrape(coordinator)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    model = {"model_name": MODEL_ID}
    reasons: dict[str, int] = {}
    for (job, _), max_tokens in runs:
        reason = _finished_reason(job, max_tokens)
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason in ("stop", "length", "abort", "error"):
        assert grew("mlxnet:request_success_total", finished_reason=reason, **model) == reasons.get(reason, 0)
    assert grew("mlxnet:generation_tokens_total", **model) == sum(streamed for (_, streamed), _ in runs)
    assert grew("mlxnet:prompt_tokens_total", **model) == sum(job.prompt_tokens for (job, _), _ in runs)
    assert grew("mlxnet:time_to_first_token_seconds_count", **model) == len(runs)
    assert grew("mlxnet:e2e_request_latency_seconds_count", **model) == len(runs)
    assert grew("mlxnet:request_queue_time_seconds_count", **model) == len(runs)
    intervals = sum(max(0, streamed - 1) for (_, streamed), _ in runs)
    assert grew("mlxnet:inter_token_latency_seconds_count", **model) == intervals
    assert grew("mlxnet:placements_total", outcome="placed") == len(runs)
    assert value(after, "mlxnet:num_requests_running", **model) == 0
    assert value(after, "mlxnet:num_requests_waiting", **model) == 0
    assert value(after, "mlxnet:macs", state="idle") == 1
    assert value(after, "mlxnet:macs", state="offline") == 0
    assert value(after, "mlxnet:streams_open", kind="node_assignments") == 1
    # Each completed job's receipt moved money: its transfers are in the ledger's chain.
    assert value(after, "mlxnet:ledger_transfers_total") > value(before, "mlxnet:ledger_transfers_total")
    completed = sum(1 for (job, _), _ in runs if job.status == job_pb2.JOB_STATUS_COMPLETED)
    checks = sum(value(after, "mlxnet:verification_checks_total", outcome=o)
                 for o in ("waiting", "peer", "passed", "failed", "unchecked", "quarantined", "awaiting_checker",
                           "forfeited"))
    assert checks == completed
    held = value(after, "mlxnet:operator_credits_held_base_units")
    posted = value(after, "mlxnet:operator_credits_posted_base_units_total")
    assert held + posted > 0


def test_a_refused_placement_counts_its_filter_reasons(network: tuple[Child, list[Child]]) -> None:
    coordinator, _ = network
    before = scrape(coordinator)
    request = job_pb2.SubmitJobRequest(
        model=MODEL_ID, prompt="Faster than any Mac", min_decode_tokens_per_s=1e6,
        sampling=common_pb2.SamplingParams(max_tokens=4))
    with open_channel(coordinator.extra["address"], coordinator.trust)[0] as channel:
        with pytest.raises(grpc.RpcError) as refused:
            job_pb2_grpc.JobServiceStub(channel).SubmitJob(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    after = scrape(coordinator)
    assert value(after, "mlxnet:placements_total", outcome="refused") - \
        value(before, "mlxnet:placements_total", outcome="refused") == 1
    assert value(after, "mlxnet:placement_refusals_total", reason="below_min_speed", permanent="true") - \
        value(before, "mlxnet:placement_refusals_total", reason="below_min_speed", permanent="true") == 1
    assert value(after, "mlxnet:placement_filtered_candidates_total", kind="mac", reason="below_min_speed") - \
        value(before, "mlxnet:placement_filtered_candidates_total", kind="mac", reason="below_min_speed") == 1
    labels = {labels for (name, labels) in after if name.startswith("mlxnet:")}
    assert not any(key in ("job_id", "node_id") for label_set in labels for key, _ in label_set)
