"""The node's self-benchmark: how long it runs and what it measures here.

    .venv/bin/python bench/node_benchmark.py [--runs 3] [--buffer-mib 256]

Builds the reference model once (as a node does on first start), then runs the
self-benchmark --runs times and prints each run's figures and run time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from node_agent.inference.benchmark import run_benchmark
from node_agent.tiny_model import build_tiny_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--buffer-mib", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        model = build_tiny_model(Path(work) / "reference")
        print(f"reference model built once in {time.perf_counter() - started:.1f} s")
        run_times = []
        for run in range(1, args.runs + 1):
            result = run_benchmark(model, "mlxnet/tiny-llama (reference)",
                                   buffer_bytes=args.buffer_mib * 2**20)
            run_times.append(result.run_time_ms)
            print(f"run {run}: {result.run_time_ms} ms; bandwidth {result.memory_bandwidth_gb_s:.1f} GB/s, "
                  f"decode {result.decode_tokens_per_s:.0f} tok/s, prefill "
                  f"{result.prefill_tokens_per_s:.0f} tok/s")
        print(f"self-benchmark run time: median {statistics.median(run_times):.0f} ms "
              f"(min {min(run_times)}, max {max(run_times)}) over {args.runs} runs")


if __name__ == "__main__":
    main()
