"""Measures the peak memory MLX uses to load a model and run one job on it.

Used to calibrate the coordinator's memory estimate (bench/memory_calibration.py).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm import load, stream_generate


@dataclass(frozen=True)
class PeakMemory:
    load_peak_bytes: int  # after loading the weights
    job_peak_bytes: int  # after prefill of the prompt and decoding


def measure_job_peak(model_path: str, prompt_tokens: int, generate_tokens: int) -> PeakMemory:
    """Load the model fresh and run a prompt of `prompt_tokens` tokens, tracking MLX's peak."""
    gc.collect()
    mx.clear_cache()
    mx.reset_peak_memory()
    model, tokenizer = load(model_path)
    mx.eval(model.parameters())
    load_peak = mx.get_peak_memory()
    prompt = mx.array([tokenizer.bos_token_id or 0] * prompt_tokens)
    for _ in stream_generate(model, tokenizer, prompt, max_tokens=generate_tokens):
        pass
    job_peak = mx.get_peak_memory()
    del model, tokenizer
    gc.collect()
    mx.clear_cache()
    return PeakMemory(int(load_peak), int(job_peak))
