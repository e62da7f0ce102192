"""Claims are not trusted until shown (issue 25): a Mac's chip is only claimed until its own
benchmark fits the chip table, and until then placement treats it as the slowest Apple chip.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.benchmarks import BenchmarkResult
from contracts.hardware import ChipTier
from coordinator.config import CoordinatorConfig
from coordinator.nodes.benchmark_check import benchmark_flag
from coordinator.placement.decision import Placement
from coordinator.service import CoordinatorService
from coordinator.storage.database import Database, upgrade_schema
from node_agent.coordinator_client import NodeStatus
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import load_or_create_identity
from tests.coordinator.verification.test_outcomes import MODEL, FakeClock
from tests.node_registration import register_node

# A Linux script's claim: an M3 Ultra, nothing measured, not declared simulated.
FAKE_ULTRA = dataclasses.replace(simulated_profile("m3-ultra-512"), simulated=False)


def _fits(bandwidth_gb_s: float) -> BenchmarkResult:
    return BenchmarkResult(memory_bandwidth_gb_s=bandwidth_gb_s, decode_tokens_per_s=300.0,
                           prefill_tokens_per_s=3000.0, reference_model="tiny",
                           reference_weights_bytes=12_000_000, measured_at_ms=1, run_time_ms=1000)


def _service(database_url: str, **config: object) -> Iterator[CoordinatorService]:
    upgrade_schema(database_url)
    db = Database(database_url)
    yield CoordinatorService(db, FakeClock(), CoordinatorConfig(database_url=database_url, **config))  # type: ignore[arg-type]
    db.dispose()


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    yield from _service(database_url)


def _predicted(service: CoordinatorService, min_decode: float = 0.0) -> Placement | None:
    decision = service.jobs.explain_placement(MODEL.model_id, 1024, min_decode)
    return decision if isinstance(decision, Placement) else None


def test_a_claimed_ultra_is_placed_as_the_slowest_mac_until_its_benchmark_fits(
        service: CoordinatorService, tmp_path: Path) -> None:
    identity = load_or_create_identity(tmp_path / "fake.pem")
    register_node(service, identity, FAKE_ULTRA, (MODEL,), "mallory")
    claimed = _predicted(service)
    assert claimed is not None and claimed.node_ids == (identity.node_id,)
    fast_job = claimed.predicted_decode_tokens_per_s * 4  # what only a real Ultra would do
    assert _predicted(service, fast_job) is None  # the fast job never lands on a mere claim
    register_node(service, identity, FAKE_ULTRA, (MODEL,), "mallory",
                  status=NodeStatus(benchmark=_fits(0.8 * 819)))
    measured = _predicted(service, fast_job)
    assert measured is not None and measured.node_ids == (identity.node_id,)
    # 68 GB/s (the slowest Apple chip) against 655 GB/s measured, within the speed grid's steps
    assert 8 < measured.predicted_decode_tokens_per_s / claimed.predicted_decode_tokens_per_s < 11


def test_a_benchmark_below_the_chips_rating_keeps_the_claim_unbelieved(
        service: CoordinatorService, tmp_path: Path) -> None:
    identity = load_or_create_identity(tmp_path / "fake.pem")
    register_node(service, identity, FAKE_ULTRA, (MODEL,), "mallory",
                  status=NodeStatus(benchmark=_fits(20.0)))  # a Linux box's real figure
    claimed = _predicted(service)
    assert claimed is not None
    honest = load_or_create_identity(tmp_path / "mini.pem")
    register_node(service, honest, simulated_profile("m4-pro-64"), (MODEL,), "alice",
                  status=NodeStatus(benchmark=_fits(0.8 * 273)))
    fast = _predicted(service, claimed.predicted_decode_tokens_per_s * 2)
    assert fast is not None and fast.node_ids == (honest.node_id,)


def test_the_tier_is_checked_against_the_chip_table() -> None:
    xeon_ultra = dataclasses.replace(FAKE_ULTRA, chip="Intel Xeon", chip_family="")
    flag = benchmark_flag(xeon_ultra, _fits(800.0))
    assert flag is not None and "not in the chip table" in flag
    max_as_ultra = dataclasses.replace(FAKE_ULTRA, chip="Apple M4 Max")
    flag = benchmark_flag(max_as_ultra, _fits(500.0))
    assert flag is not None and "M4 Max is a max chip, not ultra" in flag
    lying_rating = dataclasses.replace(FAKE_ULTRA, memory_bandwidth_gb_s=20.0)  # claims a low rating
    assert benchmark_flag(lying_rating, _fits(20.0)) is not None  # the table's 819 GB/s applies
    assert FAKE_ULTRA.chip_tier is ChipTier.ULTRA and benchmark_flag(FAKE_ULTRA, _fits(0.8 * 819)) is None


def test_a_demo_may_place_simulated_macs_as_declared(database_url: str, tmp_path: Path) -> None:
    for service in _service(database_url, trust_simulated_hardware=True):
        simulated = load_or_create_identity(tmp_path / "sim.pem")
        register_node(service, simulated, simulated_profile("m3-ultra-512"), (MODEL,), "carol")
        declared = _predicted(service)
        assert declared is not None
        fake = load_or_create_identity(tmp_path / "fake.pem")
        register_node(service, fake, FAKE_ULTRA, (MODEL,), "mallory")  # not declared simulated
        fast = _predicted(service, declared.predicted_decode_tokens_per_s * 0.9)
        assert fast is not None and fast.node_ids == (simulated.node_id,)
