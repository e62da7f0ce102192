"""Placements and their explanations are frozen values whose own checks run on every copy."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.placement import Placement, place
from tests.coordinator.placement.harness import M4_MAX, QWEN3_4B_4BIT, Fleet, job, must_place


def test_a_placement_is_frozen_checked_and_replaceable(placed: Placement) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        placed.score = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        placed.explanation.chosen_id = None  # type: ignore[misc]
    assert dataclasses.replace(placed) == placed
    assert dataclasses.replace(placed.explanation) == placed.explanation
    with pytest.raises(AssertionError):  # __post_init__'s checks still run
        dataclasses.replace(placed, reserved_memory_bytes=(0,))


@pytest.fixture
def placed() -> Placement:
    fleet = Fleet()
    fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,))
    return must_place(fleet.place(job(QWEN3_4B_4BIT)))


def test_the_explanation_shows_each_candidates_slots_in_use_as_the_index_counts_them() -> None:
    fleet = Fleet()
    fleet.mac(M4_MAX, 64, (QWEN3_4B_4BIT,), running_jobs=1, max_concurrent_jobs=4)
    index = fleet.index()
    first = must_place(place(job(QWEN3_4B_4BIT, name="job-a"), index))
    assert first.explanation.to_dict()["top_candidates"][0]["slots"] == {"in_use": 1, "total": 4}
    assert index.try_commit(first)
    second = must_place(place(job(QWEN3_4B_4BIT, name="job-b"), index))
    assert second.explanation.top_candidates[0].slots_in_use == 2  # the commit counts at once
    assert "2 of 4 slots in use" in second.explanation.render()
