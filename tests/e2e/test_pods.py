"""Pods end to end: two 2-Mac pods serve a tensor-parallel and a pipeline job through the coordinator.

Four node agents run as processes. Each pod's leader declares it in node.toml;
the leader starts both ranks with mlx.launch on the ring backend over loopback.
A memory cap on every member keeps the job from fitting one Mac alone, so the
planner must choose the pod: tensor parallel for the llama pod (its cables are
declared RDMA), pipeline for the qwen2 pod (TCP cables; qwen2 can pipeline).
The output must equal single-process greedy generation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlx_lm import load, stream_generate

from contracts.hardware import LinkKind
from contracts.lending import LendingMode
from coordinator.placement.memory import estimate_job_memory
from mlxnet.consumer import JobClient
from mlxnet.processes import Child, spawn_node, start_coordinator, wait_until_registered
from node_agent.identity import load_or_create_identity
from node_agent.tiny_model import build_tiny_model
from node_agent.lending.config import (
    BenchmarkConfig, LendingConfig, NodeConfig, PodConfig, PodLinkConfig, save_config,
)
from node_agent.model_files import describe_model
from protos.mlxnet.v1 import job_pb2

pytestmark = pytest.mark.e2e
PROMPT = "In the beginning"
MAX_TOKENS = 32


@dataclass
class Pods:
    coordinator: Child
    nodes: list[Child]
    models: dict[str, Path]  # model id -> directory
    members: dict[str, tuple[str, str]]  # model id -> (leader id, member id)

    @property
    def address(self) -> str:
        return self.coordinator.extra["address"]


def _cap_gb(model_dir: Path) -> float:
    """Room for half the job (one pod member's share), not for all of it."""
    spec = describe_model("m", model_dir)
    estimate = estimate_job_memory(spec, len(PROMPT.encode()) + MAX_TOKENS)
    shareable = estimate.total_bytes - estimate.fixed_overhead_bytes
    return (estimate.fixed_overhead_bytes + shareable * 3 // 4) / 2**30


def _write_configs(work_dir: Path, pod_id: str, names: tuple[str, str], kind: LinkKind,
                   cap_gb: float) -> tuple[str, str]:
    ids = tuple(load_or_create_identity(work_dir / "nodes" / name / "identity.pem").node_id
                for name in names)
    lending = LendingConfig(mode=LendingMode.DEDICATED, memory_cap_gb=cap_gb)
    for index, name in enumerate(names):
        pod = None
        if index == 0:  # the leader declares the pod
            pod = PodConfig(pod_id=pod_id, members=ids, hosts=("127.0.0.1", "127.0.0.1"),
                            ips=("127.0.0.1", "127.0.0.1"),
                            links=(PodLinkConfig(ids[0], ids[1], kind),), backend="ring")
        save_config(work_dir / "nodes" / name / "node.toml",
                    NodeConfig(lending=lending, benchmark=BenchmarkConfig(enabled="off"), pod=pod))
    return ids  # type: ignore[return-value]


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pods]:
    work_dir = tmp_path_factory.mktemp("pods")
    models = {"test/tiny-llama": build_tiny_model(work_dir / "llama"),
              "test/tiny-qwen2": build_tiny_model(work_dir / "qwen2", architecture="qwen2")}
    members = {
        "test/tiny-llama": _write_configs(work_dir, "tensor-pod", ("tp-leader", "tp-member"),
                                          LinkKind.RDMA_TB5, _cap_gb(models["test/tiny-llama"])),
        "test/tiny-qwen2": _write_configs(work_dir, "pipeline-pod", ("pp-leader", "pp-member"),
                                          LinkKind.TCP_THUNDERBOLT, _cap_gb(models["test/tiny-qwen2"])),
    }
    coordinator = start_coordinator(work_dir, database_url=f"sqlite:///{work_dir / 'c.db'}",
                                    heartbeat_interval_ms=500, allow_anonymous=True)
    nodes: list[Child] = []
    try:
        for name, model_id in (("tp-leader", "test/tiny-llama"), ("tp-member", "test/tiny-llama"),
                               ("pp-leader", "test/tiny-qwen2"), ("pp-member", "test/tiny-qwen2")):
            nodes.append(spawn_node(work_dir, name, coordinator.extra["address"],
                                    [f"{model_id}={models[model_id]}"], profile="m4-pro-64"))
        nodes = [wait_until_registered(child) for child in nodes]
        yield Pods(coordinator, nodes, models, members)
    finally:
        for child in [*nodes, coordinator]:
            child.stop()


def _greedy(model_dir: Path) -> str:
    model, tokenizer = load(str(model_dir))
    return "".join(r.text for r in stream_generate(model, tokenizer, PROMPT, max_tokens=MAX_TOKENS))


@pytest.mark.parametrize("model_id, strategy", [("test/tiny-llama", "tensor"),
                                                ("test/tiny-qwen2", "pipeline")])
def test_a_two_rank_pod_matches_a_single_process(pods: Pods, model_id: str, strategy: str) -> None:
    with JobClient(pods.address, trust=pods.coordinator.trust) as client:
        job = client.submit(model_id, PROMPT, max_tokens=MAX_TOKENS)
        final = [item for item in client.stream(job.job_id)][-1]
    assert isinstance(final, job_pb2.Job) and final.status == job_pb2.JOB_STATUS_COMPLETED, final
    assert final.strategy == strategy
    assert sorted(final.node_ids) == sorted(pods.members[model_id])
    assert final.receipt_verified and final.completion_tokens == MAX_TOKENS
    assert final.text == _greedy(pods.models[model_id])
