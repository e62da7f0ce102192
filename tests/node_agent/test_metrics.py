"""The node's own metrics: batch size, KV bytes, tokens, decode speed and hand-backs, served on
a loopback port; and a real node agent serving them after a real job."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contracts.models import ModelSpec
from mlxnet.consumer import JobClient
from mlxnet.processes import spawn_node, start_coordinator, wait_until_registered
from node_agent.inference.batch import PROMPT_CACHE_BLOCK
from node_agent.metrics import NodeMetrics, kv_bytes_per_token

SPEC = ModelSpec(model_id="m", weights_bytes=1 << 30, parameter_count=10**9, num_layers=4,
                 num_attention_heads=8, num_kv_heads=2, head_dim=16, max_context_tokens=512)


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_job_counts_into_batch_size_kv_bytes_and_tokens() -> None:
    metrics = NodeMetrics()
    port = metrics.serve(0)
    url = f"http://127.0.0.1:{port}/metrics"
    metrics.job_started("job-a", SPEC)
    metrics.prompt_counted("job-a", 10)
    for _ in range(5):
        metrics.token_made("job-a")
    found = scrape(url)
    assert found[("mlxnet:num_requests_running", ())] == 1
    assert found[("mlxnet:node_kv_cache_bytes", ())] == 15 * kv_bytes_per_token(SPEC) == 15 * 2 * 4 * 2 * 16 * 2
    assert found[("mlxnet:prompt_tokens_total", (("model_name", "m"),))] == 10
    assert found[("mlxnet:generation_tokens_total", (("model_name", "m"),))] == 5
    metrics.job_ended("job-a")
    metrics.handed_back()
    found = scrape(url)
    assert found[("mlxnet:num_requests_running", ())] == 0
    assert found[("mlxnet:node_kv_cache_bytes", ())] == 0
    assert found[("mlxnet:node_hand_backs_total", ())] == 1
    assert found[("mlxnet:node_decode_tokens_per_second", (("model_name", "m"),))] > 0


def test_tokens_of_a_job_never_started_are_not_counted() -> None:
    metrics = NodeMetrics()
    metrics.token_made("job-unknown")
    metrics.job_ended("job-unknown")
    assert metrics.registry.get_sample_value("mlxnet:generation_tokens_total", {"model_name": "m"}) is None
    assert metrics.registry.get_sample_value("mlxnet:num_requests_running") == 0


@pytest.mark.e2e
def test_a_real_node_serves_its_metrics_on_loopback(tmp_path: Path, tiny_model_dir: Path) -> None:
    coordinator = start_coordinator(tmp_path, database_url=f"sqlite:///{tmp_path / 'c.db'}",
                                    allow_anonymous=True)
    node = None
    try:
        node = wait_until_registered(spawn_node(
            tmp_path, "mini", coordinator.extra["address"], [f"test/tiny={tiny_model_dir}"],
            profile="m4-pro-64", extra_args=("--metrics-port", "0"), trust=coordinator.trust))
        announced = re.search(r"node metrics on http://127\.0\.0\.1:(\d+)/metrics",
                              node.log_path.read_text())
        assert announced, "the node logs where its metrics are served"
        url = f"http://127.0.0.1:{announced.group(1)}/metrics"
        with JobClient(coordinator.extra["address"], trust=coordinator.trust) as client:
            job = client.submit("test/tiny", "In the beginning", max_tokens=9)
            final = [item for item in client.stream(job.job_id)][-1]
        found = scrape(url)
        model = (("model_name", "test/tiny"),)
        assert found[("mlxnet:generation_tokens_total", model)] == final.completion_tokens == 9
        assert found[("mlxnet:prompt_tokens_total", model)] == final.prompt_tokens
        assert found[("mlxnet:prefix_cache_queries_total", model)] == final.prompt_tokens
        assert found[("mlxnet:prefix_cache_hits_total", model)] == 0
        # Two jobs sharing a long system prompt: the second reuses its KV cache in whole blocks.
        shared = "You answer in one word. " * 120
        prompts = []
        with JobClient(coordinator.extra["address"], trust=coordinator.trust) as client:
            for question in ("Why?", "How?"):
                job = client.submit("test/tiny", shared + question, max_tokens=2)
                prompts.append([item for item in client.stream(job.job_id)][-1].prompt_tokens)
        found = scrape(url)
        assert min(prompts) > 512
        assert found[("mlxnet:prefix_cache_queries_total", model)] == final.prompt_tokens + sum(prompts)
        hits = found[("mlxnet:prefix_cache_hits_total", model)]
        assert hits >= 512 and hits % PROMPT_CACHE_BLOCK == 0 and hits < prompts[1]
    finally:
        if node is not None:
            node.stop()
        coordinator.stop()
