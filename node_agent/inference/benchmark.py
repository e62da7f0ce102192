"""The node's self-benchmark: memory bandwidth, and prefill/decode speed on a reference model.

Every node measures the same things the same way, so the coordinator can
compare them and catch a Mac whose figures do not fit the chip it claims:

- bandwidth: the best of several streaming passes `b = a + 1` over a buffer far
  larger than any cache, counting the bytes read and written;
- prefill and decode: mlx-lm's own prompt and generation rates for a fixed
  prompt, after one warm-up run, on the reference model (by default the
  project's tiny model, which every node can build offline byte for byte);
- decode in batches of 1, 2, 4 and 8 jobs, as the node's continuous batch runs
  them: the tokens per second of all the batch's jobs together.

Runs on the agent's MLX worker thread, like all MLX work.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm import load, stream_generate
from mlx_lm.sample_utils import make_sampler

from contracts.benchmarks import CHALLENGE_TEMPERATURE, CHALLENGE_TOP_P, BenchmarkResult
from contracts.ids import NodeId
from contracts.models import ModelSpec
from node_agent.coordinator_client import Challenge
from node_agent.hooks import ChallengeRun
from node_agent.inference.batch import generate_batched
from node_agent.inference.engine import Engine, GenerationRequest
from node_agent.job_reports import challenge_receipt

log = logging.getLogger(__name__)

BANDWIDTH_BUFFER_BYTES = 256 * 2**20  # larger than the biggest system-level cache (M3 Ultra)
BANDWIDTH_PASSES = 5
PROMPT_TOKENS = 256
DECODE_TOKENS = 64
BATCH_SIZES = (1, 2, 4, 8)
BATCH_SIZE_MAX = 32  # the benchmark's largest batch, however many slots the node has: it stays short
REFERENCE_PROMPT = "In the beginning God created the heaven and the earth. "


def measure_bandwidth_gb_s(buffer_bytes: int = BANDWIDTH_BUFFER_BYTES,
                           passes: int = BANDWIDTH_PASSES) -> float:
    """GB/s of the fastest streaming pass (bytes read plus bytes written)."""
    assert buffer_bytes >= 2**20 and passes >= 1
    source = mx.random.uniform(shape=(buffer_bytes // 4,), dtype=mx.float32)
    mx.eval(source)
    best_s = float("inf")
    for _ in range(passes):
        started = time.perf_counter()
        result = source + 1.0
        mx.eval(result)
        best_s = min(best_s, time.perf_counter() - started)
        del result
    return 2 * source.nbytes / best_s / 1e9


def _prompt_tokens(tokenizer, count: int) -> list[int]:  # type: ignore[no-untyped-def]
    tokens: list[int] = []
    while len(tokens) < count:
        tokens += tokenizer.encode(REFERENCE_PROMPT, add_special_tokens=False)
    return tokens[:count]


def measure_generation(model_dir: Path, prompt_tokens: int = PROMPT_TOKENS,
                       decode_tokens: int = DECODE_TOKENS) -> tuple[float, float, int]:
    """(prefill tok/s, decode tok/s, weight bytes) on the model in model_dir."""
    model, tokenizer = load(str(model_dir))
    weights_bytes = sum(array.nbytes for _, array in tree_flatten(model.parameters()))
    prompt = _prompt_tokens(tokenizer, prompt_tokens)
    sampler = make_sampler(temp=0.0)
    last = None
    for _ in range(2):  # the first run warms caches and kernels; the second is measured
        for last in stream_generate(model, tokenizer, prompt, max_tokens=decode_tokens,
                                    sampler=sampler):
            pass
    assert last is not None, "generation yields at least one response"
    return last.prompt_tps, last.generation_tps, weights_bytes


def measure_batch_decode(model_dir: Path, sizes: tuple[int, ...] = BATCH_SIZES,
                         decode_tokens: int = DECODE_TOKENS) -> tuple[tuple[int, float], ...]:
    """(batch size, tokens/s of the whole batch) with the node's own batching, after a warm-up."""
    engine = Engine()
    rates = []
    for size in (sizes[0], *sizes):  # the first run warms caches and kernels; it is not kept
        requests = [GenerationRequest(str(model_dir), REFERENCE_PROMPT, decode_tokens, 0.0, 1.0, 0,
                                      f"benchmark-{size}-{i}") for i in range(size)]
        started = time.perf_counter()
        results = generate_batched(engine, requests, 1 << 20)
        rates.append((size, sum(len(r.token_ids) for r in results) / (time.perf_counter() - started)))
    return tuple((size, round(rate, 1)) for size, rate in rates[1:])


def batch_sizes(slots: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then doubling up to the node's slots, and its slots (at most BATCH_SIZE_MAX)."""
    top = min(max(slots, 1), BATCH_SIZE_MAX)
    sizes = set(BATCH_SIZES) | {top}
    size = BATCH_SIZES[-1]
    while size * 2 <= top:
        size *= 2
        sizes.add(size)
    return tuple(sorted(sizes))


def run_benchmark(reference_model_dir: Path, reference_name: str,
                  buffer_bytes: int = BANDWIDTH_BUFFER_BYTES, slots: int = BATCH_SIZES[-1]) -> BenchmarkResult:
    started = time.perf_counter()
    bandwidth = measure_bandwidth_gb_s(buffer_bytes)
    prefill, decode, weights_bytes = measure_generation(reference_model_dir)
    batches = measure_batch_decode(reference_model_dir, batch_sizes(slots))
    run_time_ms = int((time.perf_counter() - started) * 1000)
    result = BenchmarkResult(
        memory_bandwidth_gb_s=round(bandwidth, 2), decode_tokens_per_s=round(decode, 1),
        prefill_tokens_per_s=round(prefill, 1), reference_model=reference_name[:256],
        reference_weights_bytes=weights_bytes, measured_at_ms=time.time_ns() // 1_000_000,
        run_time_ms=run_time_ms, batch_decode_tokens_per_s=batches)
    log.info("self-benchmark: %.1f GB/s, decode %.0f tok/s, prefill %.0f tok/s on %s (%d ms); "
             "batched decode, all jobs' tok/s: %s", result.memory_bandwidth_gb_s, result.decode_tokens_per_s,
             result.prefill_tokens_per_s, reference_name, run_time_ms,
             ", ".join(f"{size} jobs {rate:.0f}" for size, rate in batches))
    return result


def run_challenge(engine: Engine, model: ModelSpec, model_dir: Path, node_id: NodeId,
                  challenge: Challenge) -> ChallengeRun:
    """A coordinator's challenge benchmark: decoded as a job on the reference model (the job path,
    so it carries the activation commitment the coordinator replays), with its receipt."""
    request = GenerationRequest(str(model_dir), challenge.prompt, challenge.decode_tokens,
                                CHALLENGE_TEMPERATURE, CHALLENGE_TOP_P, challenge.seed, challenge.challenge_id)
    started = time.perf_counter()
    result = engine.generate(request, model.max_context_tokens, lambda *_: True)
    rate = len(result.token_ids) / max(time.perf_counter() - started, 1e-9)
    log.info("challenge benchmark: %d tokens at %.0f tok/s", len(result.token_ids), rate)
    return ChallengeRun(result.token_ids, rate, challenge_receipt(challenge, model, result, node_id))
