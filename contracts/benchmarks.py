"""A node's self-benchmark: what it measured, reported at join time and at intervals."""

from __future__ import annotations

import math
from dataclasses import dataclass

REFERENCE_CHARS_MAX = 256
# The self-benchmark's model: the project's tiny model (node_agent.tiny_model), which every
# node and coordinator builds offline byte for byte, so the coordinator can replay a challenge.
REFERENCE_MODEL_ID = "mlxnet/tiny-llama (reference)"
# Its weights' digest (node_agent.model_files.describe_model), pinned: a coordinator knows it
# without building the model, and a test checks that the builder still makes these bytes.
REFERENCE_WEIGHTS_DIGEST = "e36b619c907d1d68f438369d0e4f5dca908e4a20fb4c6044a1d85a9f469c15c2"
# A challenge benchmark is decoded as a job with these terms and the coordinator's seed: sampled,
# not greedy, so each seed gives other tokens and no answer can be computed in advance.
CHALLENGE_TEMPERATURE = 1.0
CHALLENGE_TOP_P = 1.0


@dataclass(frozen=True)
class BenchmarkResult:
    memory_bandwidth_gb_s: float  # streaming read+write over a buffer far larger than caches
    decode_tokens_per_s: float  # greedy decoding on the reference model
    prefill_tokens_per_s: float  # one prompt pass on the reference model
    reference_model: str  # what was decoded, e.g. "mlxnet/tiny-llama (3.1M params)"
    reference_weights_bytes: int  # weight bytes read per decoded token
    measured_at_ms: int
    run_time_ms: int  # the whole benchmark, wall clock
    # (jobs decoding together in one batch, their tokens/s in all), batch sizes ascending: a busy
    # Mac is slower per job and faster in total. Empty from nodes that do not batch.
    batch_decode_tokens_per_s: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        assert all(math.isfinite(figure) for figure in (
            self.memory_bandwidth_gb_s, self.decode_tokens_per_s, self.prefill_tokens_per_s))
        assert self.memory_bandwidth_gb_s > 0, "a benchmark measures a positive bandwidth"
        assert self.decode_tokens_per_s > 0 and self.prefill_tokens_per_s > 0
        assert self.reference_weights_bytes > 0
        assert self.measured_at_ms > 0 and self.run_time_ms >= 0
        assert len(self.reference_model) <= REFERENCE_CHARS_MAX
        sizes = [size for size, _ in self.batch_decode_tokens_per_s]
        assert sizes == sorted(set(sizes)) and all(size >= 1 for size in sizes)
        assert all(rate > 0 for _, rate in self.batch_decode_tokens_per_s)

    @property
    def decode_bound_gb_s(self) -> float:
        """Bytes per second decoding must read: a floor on the Mac's real bandwidth."""
        return self.decode_tokens_per_s * self.reference_weights_bytes / 1e9
