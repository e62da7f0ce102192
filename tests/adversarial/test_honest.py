"""No false rejections: hundreds of honest jobs, single-process and 2-process tensor parallel, all pass.

Jobs vary in prompt, length, seed, temperature and top_p (harness.varied_jobs). The
tensor-parallel node runs as two real ranks over `mlx.launch --backend ring`; the receipt
is signed by the node the job was assigned to, as a pod leader would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from contracts.receipts import FinishReason
from node_agent.inference.engine import Engine, GenerationResult
from tests.adversarial.harness import (
    MODEL_ID, Coordinator, HonestNode, Job, new_identity, receipt_for, run_batched, signed, varied_jobs,
)

# 500 jobs in all. Most are short, so the suite stays cheap on a CPU whose bundled BLAS makes
# even a prefill slow; a few long ones span several commitment chunks. bench/calibrate_tolerances.py
# runs longer jobs across BLAS builds.
SHORT_JOBS = 452
LONG_JOBS = 24
TENSOR_PARALLEL_JOBS = 24
LAUNCH_TIMEOUT_S = 600


def test_single_process_honest_jobs_are_never_rejected(proof_engine: Engine, tiny_model_dir: Path,
                                                      checks: Coordinator) -> None:
    node = HonestNode(proof_engine, tiny_model_dir)
    jobs = (varied_jobs(SHORT_JOBS, seed=1, max_tokens_max=16, words_max=8)
            + varied_jobs(LONG_JOBS, seed=3, max_tokens_max=100, words_max=40))
    rejected = []
    for job in jobs:
        report, _ = node.run(job)
        outcome = checks.judge(job, node.identity, report)
        if outcome.caught:
            rejected.append((job, outcome.reasons))
    assert rejected == []
    assert len({(j.temperature, j.top_p) for j in jobs}) > 10 and len({j.max_tokens for j in jobs}) > 30
    assert max(j.max_tokens for j in jobs) > 64  # three or more generated chunks


BATCH_SIZES = (1, 2, 4, 8, 16, 32)


@pytest.mark.timeout(1800)  # 500 jobs and 500 replays: longer than the default budget on a loaded 2-core machine
def test_batched_honest_jobs_are_never_rejected(proof_engine: Engine, tiny_model_dir: Path,
                                                checks: Coordinator) -> None:
    """500 honest jobs run in continuous batches of 1 to 32, joining a batch already running."""
    node = HonestNode(proof_engine, tiny_model_dir)
    jobs = (varied_jobs(SHORT_JOBS, seed=5, max_tokens_max=16, words_max=8)
            + varied_jobs(LONG_JOBS + TENSOR_PARALLEL_JOBS, seed=6, max_tokens_max=100, words_max=40))
    rejected, start, sizes = [], 0, []
    while start < len(jobs):
        size = BATCH_SIZES[len(sizes) % len(BATCH_SIZES)]
        group = jobs[start:start + size]
        for job, result in zip(group, run_batched(proof_engine, tiny_model_dir, group)):
            receipt = receipt_for(job, node.identity, MODEL_ID, node.weights_digest, result)
            outcome = checks.judge(job, node.identity, signed(receipt, node.identity, result.token_ids))
            if outcome.caught:
                rejected.append((job, outcome.reasons))
        start += size
        sizes.append(len(group))
    assert rejected == []
    assert len(jobs) == 500 and max(sizes) == 32 and min(sizes) == 1


def _launch_tensor_parallel(jobs: list[Job], model_dir: Path, work: Path) -> list[dict]:
    jobs_file = work / "jobs.json"
    jobs_file.write_text(json.dumps([asdict(j) for j in jobs]))
    launcher = Path(sys.executable).with_name("mlx.launch")
    root = Path(__file__).resolve().parents[2]
    subprocess.run([str(launcher), "-n", "2", "--backend", "ring", "--", sys.executable, "-m",
                    "tests.adversarial.tp_node", str(jobs_file), str(model_dir), str(work / "out")],
                   cwd=root, check=True, timeout=LAUNCH_TIMEOUT_S, capture_output=True)
    ranks = []
    for rank in (0, 1):  # mlx.launch exits 0 even when a rank fails: read each rank's own file
        lines = [json.loads(line) for line in (work / f"out.rank{rank}.jsonl").read_text().splitlines()]
        assert lines and lines[-1] == {"done": True}, f"rank {rank} did not finish"
        assert all(line["ranks"] == 2 for line in lines[:-1])
        ranks.append(lines[:-1])
    return ranks


def test_tensor_parallel_honest_jobs_are_never_rejected(tmp_path: Path, tiny_model_dir: Path,
                                                        checks: Coordinator) -> None:
    jobs = varied_jobs(TENSOR_PARALLEL_JOBS, seed=2, max_tokens_max=12, words_max=16)
    rank0, rank1 = _launch_tensor_parallel(jobs, tiny_model_dir, tmp_path)
    assert [(r["result"]["token_ids"], r["commitment"]) for r in rank0] == \
        [(r["result"]["token_ids"], r["commitment"]) for r in rank1]
    leader = new_identity()
    rejected = []
    for job, line in zip(jobs, rank0, strict=True):
        fields = {**line["result"], "token_ids": tuple(line["result"]["token_ids"]),
                  "finish_reason": FinishReason(line["result"]["finish_reason"])}
        result = GenerationResult(**fields, activation_commitment=bytes.fromhex(line["commitment"]))
        report = signed(receipt_for(job, leader, MODEL_ID, checks.spec.weights_digest, result),
                        leader, result.token_ids)
        outcome = checks.judge(job, leader, report)
        if outcome.caught:
            rejected.append((job, outcome.reasons))
    assert rejected == []

