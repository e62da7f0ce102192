"""Unit tests: the bandwidth-bound decode model against mlx-lm's published Qwen3-4B figures, and the
pod speed rules."""

from __future__ import annotations

import pytest

from contracts.hardware import LinkKind
from coordinator.placement import JobRequest, Placement, SpeedConfig, place
from coordinator.placement.speed import (
    SpeedProfile, bytes_read_per_token, decode_tokens_per_s, effective_bandwidth_step, link_latency_s,
    prefill_tokens_per_s, step_bandwidth_bytes_per_s, tensor_speedup, time_to_first_token_s,
)
from tests.coordinator.placement.harness import M4_MAX, QWEN3_4B_4BIT, Fleet, model

QWEN3_4B_BF16 = model("qwen3-4b-bf16", 4.02e9, 16, 36, 32, 8)


def _m4_max(config: SpeedConfig) -> SpeedProfile:
    fleet = Fleet()
    node = fleet.mac(M4_MAX, 64, ())
    return SpeedProfile(effective_bandwidth_step(fleet.macs[node], config))


@pytest.mark.parametrize(("spec", "eta", "published"), [(QWEN3_4B_4BIT, 0.64, 134.5), (QWEN3_4B_BF16, 0.8, 52.5)])
def test_decode_matches_the_published_qwen3_4b_figures_with_eta_per_model_class(spec, eta, published) -> None:
    # mlx-lm on an M4 Max, prompt 2048, 128 generated; η within the brief's 0.35-0.8 per model class.
    config = SpeedConfig(decode_efficiency=eta)
    job = JobRequest("job-1", spec, 2048 + 128)
    predicted = decode_tokens_per_s(_m4_max(config), bytes_read_per_token(job), config)
    assert predicted == pytest.approx(published, rel=0.1)


def test_the_default_eta_is_conservative() -> None:
    job = JobRequest("job-1", QWEN3_4B_4BIT, 2176)
    config = SpeedConfig()
    assert decode_tokens_per_s(_m4_max(config), bytes_read_per_token(job), config) < 134.5


def test_prefill_is_compute_bound() -> None:
    # 0.8 x 40 cores x 0.4 TFLOP/s / (2 x 4.02e9) = 1,592 tok/s; measured 1,781 for bf16.
    job = JobRequest("job-1", QWEN3_4B_BF16, 2176)
    assert prefill_tokens_per_s(job, 40, 50.0, 1.0, SpeedConfig()) == pytest.approx(1592, rel=0.01)
    assert prefill_tokens_per_s(job, 0, 50.0, 1.0, SpeedConfig()) == 500.0  # cores unknown: 10x decode


def test_bandwidth_snaps_down_by_less_than_one_grid_step() -> None:
    config = SpeedConfig()
    fleet = Fleet()
    exact = 0.5 * 546e9
    snapped = step_bandwidth_bytes_per_s(effective_bandwidth_step(fleet.macs[fleet.mac(M4_MAX, 64, ())], config), config)
    assert exact / 2 ** (1 / config.bandwidth_grid_per_octave) < snapped <= exact


@pytest.mark.parametrize(("members", "speedup"), [(1, 1.0), (2, 1.8), (3, 2.5), (4, 3.2), (8, 6.0)])
def test_tensor_speedup_follows_the_published_points(members: int, speedup: float) -> None:
    assert tensor_speedup(members, SpeedConfig()) == pytest.approx(speedup)


def test_a_pipeline_pays_link_latency_per_hop() -> None:
    config = SpeedConfig()
    single = SpeedProfile(200)
    tcp = SpeedProfile(200, 1.0, 3, link_latency_s(LinkKind.TCP_THUNDERBOLT, config))
    rdma = SpeedProfile(200, 1.0, 3, link_latency_s(LinkKind.RDMA_TB5, config))
    speeds = [decode_tokens_per_s(p, 10**9, config) for p in (single, rdma, tcp)]
    assert speeds[0] > speeds[1] > speeds[2]


def test_a_cold_model_adds_its_load_time_to_the_first_token_and_a_warm_one_none() -> None:
    config = SpeedConfig()
    job = JobRequest("job-1", QWEN3_4B_4BIT, 4096, prompt_tokens=1000)
    warm = time_to_first_token_s(job, 1000.0, 50.0, 0, config)
    assert warm == pytest.approx(1.0 + 1 / 50)
    cold = time_to_first_token_s(job, 1000.0, 50.0, QWEN3_4B_4BIT.weights_bytes, config)
    assert cold == pytest.approx(warm + QWEN3_4B_4BIT.weights_bytes / config.cold_load_bytes_per_s)


def test_a_placement_on_a_warm_mac_predicts_an_earlier_first_token() -> None:
    fleet = Fleet()
    fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,), name="cold")
    fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,), name="warm", warm_models=frozenset({QWEN3_4B_4BIT.model_id}))
    snapshot = fleet.snapshot()
    job = JobRequest("job-1", QWEN3_4B_4BIT, 4096)
    on_warm = place(job, snapshot)
    assert isinstance(on_warm, Placement) and on_warm.node_ids == ("warm",)
    cold_only = type(snapshot)(tuple(mac for mac in snapshot.macs if mac.node_id == "cold"))
    on_cold = place(job, cold_only)
    assert isinstance(on_cold, Placement) and on_cold.node_ids == ("cold",)
    load_s = QWEN3_4B_4BIT.weights_bytes / SpeedConfig().cold_load_bytes_per_s
    assert on_cold.predicted_time_to_first_token_s == pytest.approx(on_warm.predicted_time_to_first_token_s + load_s)
