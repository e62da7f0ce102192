"""Unit tests: the memory a job needs, what a Mac can give, and how a pod splits layers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.hardware import ChipTier
from coordinator.placement import LendingMode, MemoryConfig, estimate_job_memory, split_layers_by_memory
from coordinator.placement.memory import (
    kv_cache_bytes_per_token, mac_ceiling_bytes, pipeline_shares_bytes, tensor_shares_bytes,
)
from tests.coordinator.placement.harness import GIB, M4_PRO, M3_ULTRA, QWEN3_4B_4BIT, Fleet, hardware


def test_kv_cache_is_two_times_layers_kv_heads_head_dim_bytes_per_token() -> None:
    # Qwen3-4B: 36 layers, 8 KV heads of 128, bf16 cache.
    assert kv_cache_bytes_per_token(QWEN3_4B_4BIT) == 2 * 36 * 8 * 128 * 2 == 147_456


def test_estimate_counts_weights_kv_and_overhead() -> None:
    config = MemoryConfig(overhead_fixed_bytes=GIB, overhead_fraction_of_weights=0.05)
    estimate = estimate_job_memory(QWEN3_4B_4BIT, 2176, config)
    assert estimate.weights_bytes == QWEN3_4B_4BIT.weights_bytes
    assert estimate.kv_cache_bytes == 147_456 * 2176
    hidden_states = 2048 * 16 * (32 * 128) * 2  # one prefill chunk of bf16 hidden activations
    assert estimate.overhead_bytes == GIB + hidden_states + -(-QWEN3_4B_4BIT.weights_bytes * 5 // 100)
    assert estimate.total_bytes == estimate.weights_bytes + estimate.kv_cache_bytes + estimate.overhead_bytes
    # mlx-lm measured a 3.35 GB peak for this model and context: the estimate must not be below it.
    assert estimate.total_bytes >= 3.35e9


def test_past_one_prefill_chunk_the_estimate_grows_only_through_the_kv_cache() -> None:
    short, long = estimate_job_memory(QWEN3_4B_4BIT, 3000), estimate_job_memory(QWEN3_4B_4BIT, 5000)
    assert long.total_bytes - short.total_bytes == 2000 * kv_cache_bytes_per_token(QWEN3_4B_4BIT)


def test_materialized_attention_scores_cost_heads_by_context_per_chunk_token() -> None:
    metal = estimate_job_memory(QWEN3_4B_4BIT, 3000)
    cpu = estimate_job_memory(QWEN3_4B_4BIT, 3000, MemoryConfig(attention_scores_materialized=True))
    assert cpu.total_bytes - metal.total_bytes == 2048 * 32 * 3000 * 4


def test_estimate_constants_are_injectable() -> None:
    lean = estimate_job_memory(QWEN3_4B_4BIT, 1024, MemoryConfig(
        overhead_fixed_bytes=1, overhead_fraction_of_weights=0.0, activation_hidden_multiple=0))
    assert lean.overhead_bytes == 1


def _mac(memory_gib: int, mode: LendingMode, cap: int | None = None):
    fleet = Fleet()
    node = fleet.mac(M4_PRO, memory_gib, (), mode=mode, memory_cap_bytes=cap)
    return fleet.macs[node]


def test_idle_mac_keeps_an_owner_reserve_and_dedicated_does_not() -> None:
    config = MemoryConfig(owner_reserve_min_bytes=8 * GIB, owner_reserve_fraction=0.25)
    # 64 GiB idle: min(GPU budget 48, 64 - max(8, 16) = 48) = 48 GiB.
    assert mac_ceiling_bytes(_mac(64, LendingMode.IDLE), config) == 48 * GIB
    # 24 GiB idle: min(18, 24 - 8) = 16 GiB; dedicated gets the whole GPU budget of 18.
    assert mac_ceiling_bytes(_mac(24, LendingMode.IDLE), config) == 16 * GIB
    assert mac_ceiling_bytes(_mac(24, LendingMode.DEDICATED), config) == 18 * GIB


def test_operator_cap_limits_the_ceiling() -> None:
    assert mac_ceiling_bytes(_mac(64, LendingMode.DEDICATED, cap=10 * GIB), MemoryConfig()) == 10 * GIB


def test_gpu_working_set_limits_the_ceiling() -> None:
    report = hardware(M3_ULTRA, 512)
    assert report.chip_tier is ChipTier.ULTRA and report.gpu_working_set_bytes == 384 * GIB


@pytest.mark.parametrize(("layers", "memory", "expected"), [
    (61, (512, 512, 512, 512), (16, 15, 15, 15)),
    (80, (192, 64), (60, 20)),
    (32, (100, 1, 1), (30, 1, 1)),  # every member holds at least one layer
    (4, (1, 1, 1, 1), (1, 1, 1, 1)),
    (10, (3, 3, 4), (3, 3, 4)),
])
def test_split_layers_by_memory(layers: int, memory: tuple[int, ...], expected: tuple[int, ...]) -> None:
    assert split_layers_by_memory(layers, memory) == expected


def test_split_layers_rejects_more_members_than_layers() -> None:
    with pytest.raises(AssertionError):
        split_layers_by_memory(2, (1, 1, 1))


def test_member_shares_cover_the_job() -> None:
    estimate = estimate_job_memory(QWEN3_4B_4BIT, 4096)
    tensor = tensor_shares_bytes(estimate, 4)
    assert sum(tensor) >= estimate.total_bytes + 3 * estimate.fixed_overhead_bytes
    pipeline = pipeline_shares_bytes(estimate, 36, (10, 10, 16))
    assert sum(pipeline) >= estimate.pod_total_bytes(3)
    assert pipeline[2] > pipeline[0] == pipeline[1]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=1 << 41), min_size=1, max_size=6), st.integers(0, 200))
def test_split_layers_sums_and_follows_memory(memory: list[int], extra_layers: int) -> None:
    layers = len(memory) + extra_layers
    split = split_layers_by_memory(layers, tuple(memory))
    assert sum(split) == layers and min(split) >= 1
    # A member with more memory never holds fewer layers.
    for more, fewer in itertools.permutations(range(len(memory)), 2):
        if memory[more] > memory[fewer]:
            assert split[more] >= split[fewer]
