"""The self-benchmark runs for real on the tiny model (MLX on the CPU here)."""

from __future__ import annotations

from pathlib import Path

from node_agent.inference.benchmark import batch_sizes, measure_bandwidth_gb_s, run_benchmark


def test_the_benchmark_measures_bandwidth_and_both_rates(tiny_model_dir: Path) -> None:
    result = run_benchmark(tiny_model_dir, "mlxnet/tiny-llama", buffer_bytes=16 * 2**20)
    assert result.memory_bandwidth_gb_s > 0 and result.decode_tokens_per_s > 0
    assert result.prefill_tokens_per_s > 0 and result.run_time_ms > 0
    weights_file = (tiny_model_dir / "model.safetensors").stat().st_size
    assert 0.9 * weights_file < result.reference_weights_bytes <= weights_file
    assert measure_bandwidth_gb_s(2**20, passes=1) > 0
    assert [size for size, _ in result.batch_decode_tokens_per_s] == [1, 2, 4, 8]
    assert all(rate > 0 for _, rate in result.batch_decode_tokens_per_s)


def test_batch_sizes_reach_the_nodes_slots_by_doubling_and_stop_at_the_cap() -> None:
    assert batch_sizes(1) == batch_sizes(8) == (1, 2, 4, 8)
    assert batch_sizes(12) == (1, 2, 4, 8, 12)
    assert batch_sizes(32) == (1, 2, 4, 8, 16, 32)
    assert batch_sizes(256) == (1, 2, 4, 8, 16, 32)  # the benchmark stays short however many slots
