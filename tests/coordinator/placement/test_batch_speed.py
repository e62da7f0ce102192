"""A busy Mac is slower per job and faster in total: a job's predicted speed counts the jobs already
in the Mac's batch, from the Mac's own measured batch speeds or a conservative default until then."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.placement import FleetIndex, Placement, place, place_exhaustive
from coordinator.placement.config import SpeedConfig
from coordinator.placement.filters import FilterReason
from coordinator.placement.speed import batch_share, effective_bandwidth_step, loaded_bandwidth_step
from tests.coordinator.placement.harness import M4_MAX, QWEN3_4B_4BIT, Fleet, job, must_place, must_refuse
from tests.coordinator.placement.test_decisions import comparable
from tests.coordinator.placement.test_properties import CONFIG, SETTINGS

SPEED = SpeedConfig()
# Darkbloom's M4 Max figures per request at 1 / 2 / 4 / 8 requests (the brief), as tokens/s in all.
DARKBLOOM = ((1, 92.8), (2, 2 * 69.5), (4, 4 * 35.9), (8, 8 * 29.6))


def test_unmeasured_macs_get_the_conservative_default_stated_in_the_config() -> None:
    gain = SPEED.unmeasured_batch_gain
    assert batch_share((), 1, SPEED) == 1.0
    for jobs in (2, 4, 8, 32):
        assert batch_share((), jobs, SPEED) == pytest.approx((1 + gain * (jobs - 1)) / jobs)
    for jobs in (2, 3, 4, 6, 8):  # where Darkbloom measured
        # Below the published curve: a guess never promises more than a measured Mac gives.
        assert batch_share((), jobs, SPEED) <= batch_share(DARKBLOOM, jobs, SPEED)


def test_measured_speeds_are_interpolated_and_held_flat_past_the_largest_batch() -> None:
    assert batch_share(DARKBLOOM, 2, SPEED) == pytest.approx(69.5 / 92.8)
    assert batch_share(DARKBLOOM, 8, SPEED) == pytest.approx(29.6 / 92.8)
    three = (2 * 69.5 + (4 * 35.9 - 2 * 69.5) / 2) / 3  # halfway between 2 and 4 jobs, in all
    assert batch_share(DARKBLOOM, 3, SPEED) == pytest.approx(three / 92.8)
    assert batch_share(DARKBLOOM, 16, SPEED) == pytest.approx(8 * 29.6 / 16 / 92.8)  # no more than measured
    assert batch_share(((2, 150.0), (4, 200.0)), 4, SPEED) == batch_share((), 4, SPEED)  # no batch of 1: unusable


@SETTINGS
@given(st.lists(st.floats(1.0, 5000.0), min_size=1, max_size=6), st.integers(1, 64))
def test_a_jobs_share_is_never_above_alone_and_the_batch_never_beats_its_best_measured_total(rates, jobs) -> None:
    points = tuple((2 ** i, rate) for i, rate in enumerate(rates))
    share = batch_share(points, jobs, SPEED)
    assert 0.0 < share <= 1.0
    assert share * jobs * points[0][1] <= max(rate for _, rate in points) * (1 + 1e-9)


def _two_macs(**busy) -> tuple[Fleet, FleetIndex]:
    fleet = Fleet(CONFIG)
    fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,), name="busy", max_concurrent_jobs=8, **busy)
    fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,), name="idle", max_concurrent_jobs=8)
    return fleet, fleet.index()


def test_a_busy_mac_predicts_less_per_job_and_the_explanation_shows_its_slots() -> None:
    fleet, index = _two_macs(running_jobs=3, committed_memory_bytes=12 << 30, batch_decode_tokens_per_s=DARKBLOOM)
    busy, idle = fleet.macs["busy"], fleet.macs["idle"]
    assert loaded_bandwidth_step(busy, 3, SPEED) == effective_bandwidth_step(busy, SPEED) + math.floor(
        math.log2(batch_share(DARKBLOOM, 4, SPEED)) * SPEED.bandwidth_grid_per_octave)
    assert loaded_bandwidth_step(idle, 0, SPEED) == effective_bandwidth_step(idle, SPEED)
    decision = must_place(place(job(QWEN3_4B_4BIT, 4096, min_speed=60.0), index))
    candidates = {c.candidate_id: c for c in decision.explanation.top_candidates}
    assert decision.node_ids == ("idle",)
    assert candidates["idle"].slots_in_use == 0 and candidates["idle"].slots == 8
    # The busy Mac is too slow now for this job's minimum: filtered, not chosen.
    assert decision.explanation.filtered_count(FilterReason.BELOW_MIN_SPEED) == 1
    any_speed = must_place(place(job(QWEN3_4B_4BIT, 4096, name="any"), index))
    speeds = {c.candidate_id: c.predicted_decode_tokens_per_s for c in any_speed.explanation.top_candidates}
    assert speeds["busy"] < 0.4 * speeds["idle"]  # Darkbloom's 4-job share is 0.39 (then snapped down)
    assert {c.candidate_id: c.slots_in_use for c in any_speed.explanation.top_candidates} == {"busy": 3, "idle": 0}


def test_a_job_too_fast_for_a_busy_mac_waits_for_it_rather_than_being_refused() -> None:
    fleet = Fleet(CONFIG)
    fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,), name="only", max_concurrent_jobs=8, running_jobs=4,
              committed_memory_bytes=16 << 30)
    refused = must_refuse(place(job(QWEN3_4B_4BIT, 4096, min_speed=60.0), fleet.index()))
    assert not refused.permanent  # idle, the Mac is fast enough: the job waits for it
    assert refused.explanation.filtered_count(FilterReason.BELOW_MIN_SPEED) == 1


def test_each_commit_slows_the_next_jobs_prediction_and_each_release_restores_it() -> None:
    fleet = Fleet(CONFIG)
    fleet.mac(M4_MAX, 128, (QWEN3_4B_4BIT,), name="studio", max_concurrent_jobs=8,
              batch_decode_tokens_per_s=DARKBLOOM)
    index = fleet.index()
    placed: list[Placement] = []
    speeds = []
    for n in range(6):
        decision = must_place(place(job(QWEN3_4B_4BIT, 4096, name=f"job-{n}"), index))
        assert comparable(decision) == comparable(place_exhaustive(job(QWEN3_4B_4BIT, 4096, name=f"job-{n}"),
                                                                   index.snapshot(), CONFIG))
        speeds.append(decision.predicted_decode_tokens_per_s)
        assert index.try_commit(decision)
        placed.append(decision)
    assert speeds == sorted(speeds, reverse=True) and speeds[-1] < speeds[0] * 0.5
    for decision in placed:
        index.release(decision)
    again = must_place(place(job(QWEN3_4B_4BIT, 4096, name="after"), index))
    assert again.predicted_decode_tokens_per_s == speeds[0]
    assert FleetIndex.build(index.snapshot(), CONFIG).snapshot() == index.snapshot()
