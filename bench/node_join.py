"""Time from `mlxnet node` start to its first job accepted, on loopback.

    .venv/bin/python bench/node_join.py [--repeats 3]

Starts a coordinator, then for each case starts a fresh node agent process
and at once submits a job for its model, timing (a) until the agent printed
that it registered and (b) until the job's first token reached the consumer,
which is when the agent had accepted and started the job. Cases: a simulated
Mac (no self-benchmark) and this real host with the self-benchmark on, whose
first start also builds the reference model.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from mlxnet.consumer import JobClient, StreamedTokens
from mlxnet.processes import spawn_node, start_coordinator, wait_until_registered
from node_agent.tiny_model import build_tiny_model
from node_agent.lending.config import BenchmarkConfig, LendingConfig, NodeConfig, save_config
from contracts.lending import LendingMode
from contracts.tls import CoordinatorTrust


def _one(work: Path, address: str, trust: CoordinatorTrust, name: str, model_dir: Path,
         profile: str | None, benchmark: str) -> tuple[float, float]:
    save_config(work / "nodes" / name / "node.toml",
                NodeConfig(lending=LendingConfig(mode=LendingMode.DEDICATED),
                           benchmark=BenchmarkConfig(enabled=benchmark)))
    model_id = f"bench/{name}"
    started = time.perf_counter()
    child = spawn_node(work, name, address, [f"{model_id}={model_dir}"], profile=profile, trust=trust)
    try:
        wait_until_registered(child)
        registered_s = time.perf_counter() - started
        with JobClient(address, trust=trust) as client:
            job = client.submit(model_id, "In the beginning", max_tokens=8)
            for item in client.stream(job.job_id):
                if isinstance(item, StreamedTokens):
                    break
        return registered_s, time.perf_counter() - started
    finally:
        child.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = build_tiny_model(work / "model")
        coordinator = start_coordinator(work, allow_anonymous=True)
        try:
            address = coordinator.extra["address"]
            for label, profile, benchmark in (("simulated Mac, no self-benchmark", "m4-pro-64", "off"),
                                              ("this host, self-benchmark at join", None, "on")):
                runs = [_one(work, address, coordinator.trust, f"{profile or 'host'}-{benchmark}-{n}", model_dir, profile,
                             benchmark) for n in range(args.repeats)]
                registered = statistics.median(r for r, _ in runs)
                first_job = statistics.median(f for _, f in runs)
                print(f"{label}: registered {registered:.2f} s, first job accepted (first token) "
                      f"{first_job:.2f} s after `mlxnet node` started (median of {args.repeats})")
        finally:
            coordinator.stop()


if __name__ == "__main__":
    main()
