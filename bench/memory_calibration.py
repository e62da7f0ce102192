"""How well the placement memory estimate covers what MLX really uses.

    .venv/bin/python -m bench.memory_calibration

For the project's models (llama and qwen2 builds, fp32 and an fp16 copy) and
several contexts, it loads the model in a fresh process, runs a job at that
context and compares MLX's peak memory with estimate_job_memory(). It prints
the estimate with and without its fixed overhead, so the per-token and
per-weight parts can be judged apart from the fixed allowance (sized for
Metal's runtime, which this CPU build does not have).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from coordinator.placement import MemoryConfig, estimate_job_memory
from node_agent.model_files import describe_model

CONTEXTS = (128, 512, 1024, 2000)
GENERATE_TOKENS = 16
MB = 1_000_000
CPU_BUILD = MemoryConfig(attention_scores_materialized=True)
QWEN3_4B_4BIT_PEAK_BYTES = 3_350_000_000  # mlx-lm BENCHMARKS.md, M4 Max, prompt 2048 + 128


def _measure_in_fresh_process(model_dir: Path, context: int) -> int:
    code = ("import sys, json; from node_agent.inference.memory_probe import measure_job_peak; "
            f"p = measure_job_peak({str(model_dir)!r}, {context - GENERATE_TOKENS}, {GENERATE_TOKENS}); "
            "print(json.dumps(p.job_peak_bytes))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1]))


def _fp16_copy(source: Path, target: Path) -> Path:
    code = ("import mlx.core as mx, shutil, sys; from pathlib import Path; "
            f"s, t = Path({str(source)!r}), Path({str(target)!r}); shutil.copytree(s, t); "
            "w = mx.load(str(s / 'model.safetensors')); "
            "mx.save_safetensors(str(t / 'model.safetensors'), {k: v.astype(mx.float16) for k, v in w.items()}, metadata={'format': 'mlx'})")
    subprocess.run([sys.executable, "-c", code], check=True)
    return target


def main() -> None:
    from node_agent.tiny_model import build_tiny_model

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        llama = build_tiny_model(root / "llama")
        models = {"llama fp32": llama, "qwen2 fp32": build_tiny_model(root / "qwen2", architecture="qwen2"),
                  "llama fp16": _fp16_copy(llama, root / "llama16")}
        for name, directory in models.items():
            spec = describe_model(name, directory)
            for context in CONTEXTS:
                measured = _measure_in_fresh_process(directory, context)
                # This is MLX's CPU build, which holds attention scores; Metal does not.
                estimate = estimate_job_memory(spec, context, CPU_BUILD)
                variable = estimate.total_bytes - estimate.fixed_overhead_bytes
                rows.append((name, context, measured, estimate.total_bytes, variable))
    print(f"{'model':<11} {'context':>7} {'measured MB':>12} {'estimate MB':>12} "
          f"{'est. w/o fixed MB':>18} {'covers':>7} {'error w/o fixed':>16}")
    for name, context, measured, total, variable in rows:
        print(f"{name:<11} {context:>7} {measured / MB:>12.2f} {total / MB:>12.2f} {variable / MB:>18.2f} "
              f"{'yes' if total >= measured else 'NO':>7} {(variable - measured) / measured:>+15.1%}")
    _published_reference()


def _published_reference() -> None:
    """The estimate on Metal's terms against mlx-lm's published Qwen3-4B 4-bit peak."""
    from contracts.models import ModelSpec

    spec = ModelSpec(model_id="Qwen3-4B-4bit", weights_bytes=2_261_250_000,
                     parameter_count=4_020_000_000, num_layers=36, num_attention_heads=32,
                     num_kv_heads=8, head_dim=128, max_context_tokens=40_960)
    estimate = estimate_job_memory(spec, 2048 + 128)
    print(f"\nQwen3-4B 4-bit on Metal, context 2176: estimate {estimate.total_bytes / MB:,.0f} MB, "
          f"published peak {QWEN3_4B_4BIT_PEAK_BYTES / MB:,.0f} MB "
          f"({(estimate.total_bytes - QWEN3_4B_4BIT_PEAK_BYTES) / QWEN3_4B_4BIT_PEAK_BYTES:+.1%})")


if __name__ == "__main__":
    main()
