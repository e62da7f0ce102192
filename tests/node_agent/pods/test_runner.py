"""The pod leader's launcher: backend choice, mlx.launch hostfiles, and a rank that dies.

The last test starts two real ranks on the ring backend over loopback, one of
which dies before writing its result: mlx.launch exits 0 anyway, and the
leader must hand the job back.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from contracts.hardware import LinkKind
from node_agent.coordinator_client import Assignment
from node_agent.lending.config import PodConfig, PodLinkConfig
from node_agent.model_files import describe_model
from node_agent.pods.runner import PodRun, choose_backend, hostfile, pod_declaration

RDMA = PodConfig(pod_id="desk", members=("node-a", "node-b"), hosts=("a.local", "b.local"),
                 ips=("10.0.0.1", "10.0.0.2"), links=(PodLinkConfig("node-a", "node-b", LinkKind.RDMA_TB5),),
                 rdma_devices=((None, "rdma_en3"), ("rdma_en3", None)))
LOCAL = PodConfig(pod_id="local", members=("node-a", "node-b"), hosts=("127.0.0.1", "127.0.0.1"),
                  ips=("127.0.0.1", "127.0.0.1"),
                  links=(PodLinkConfig("node-a", "node-b", LinkKind.TCP_THUNDERBOLT),))


def test_jaccl_only_when_every_cable_is_rdma_and_devices_are_known() -> None:
    assert choose_backend(RDMA) == "jaccl"
    assert choose_backend(LOCAL) == "ring"
    no_devices = PodConfig(**{**RDMA.__dict__, "rdma_devices": ()})
    assert choose_backend(no_devices) == "ring"
    assert choose_backend(PodConfig(**{**RDMA.__dict__, "backend": "ring"})) == "ring"


def test_hostfiles_in_mlx_launch_format() -> None:
    assert hostfile(RDMA, "jaccl") == {"backend": "jaccl", "hosts": [
        {"ssh": "a.local", "ips": ["10.0.0.1"], "rdma": [None, "rdma_en3"]},
        {"ssh": "b.local", "ips": ["10.0.0.2"], "rdma": ["rdma_en3", None]}]}
    assert hostfile(LOCAL, "ring")["hosts"][1] == {"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}


def test_the_declaration_sent_to_the_coordinator() -> None:
    pod = pod_declaration(RDMA, "node-a")
    assert pod.leader == "node-a" and pod.members == ("node-a", "node-b")
    assert pod.cables[0].kind is LinkKind.RDMA_TB5


class Sender:
    def __init__(self) -> None:
        self.offered: list[tuple[int, int, str]] = []

        self.prompt_tokens: int | None = None

    def note_prompt_tokens(self, count: int) -> None:
        self.prompt_tokens = count

    def offer(self, index: int, token_id: int, text: str) -> bool:
        self.offered.append((index, token_id, text))
        return True


def test_a_rank_that_dies_hands_the_job_back_though_mlx_launch_exits_0(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    # Rank 1's "python" exits at once without a result, like a member that lost power.
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nif [ "$MLX_RANK" = "1" ]; then exit 3; fi\nexec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    spec = describe_model("tiny", tiny_model_dir)
    run = PodRun(LOCAL, {"tiny": tiny_model_dir}, tmp_path / "runs", python=str(python), timeout_s=120)
    assignment = Assignment("job-dies", spec, "In the beginning", 8, 0.0, 1.0, 0, "tensor",
                            "local", "node-a", ("node-a", "node-b"), (4, 4))
    result = run(assignment, Sender(), lambda: True)  # type: ignore[arg-type]
    assert result.handed_back_reason is not None and "rank" in result.handed_back_reason
    assert result.failure_reason is None and result.result is None
    assert os.path.exists(tmp_path / "runs" / "job-dies" / "launch.log")


def test_members_that_differ_from_the_config_hand_back(tmp_path: Path, tiny_model_dir: Path) -> None:
    spec = describe_model("tiny", tiny_model_dir)
    run = PodRun(LOCAL, {"tiny": tiny_model_dir}, tmp_path / "runs")
    assignment = Assignment("job-x", spec, "p", 8, 0.0, 1.0, 0, "tensor", "local", "node-a",
                            ("node-a", "node-c"), (4, 4))
    result = run(assignment, Sender(), lambda: True)  # type: ignore[arg-type]
    assert result.handed_back_reason is not None and "differ" in result.handed_back_reason
