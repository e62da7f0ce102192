"""Placements and their explanations are frozen values whose own checks run on every copy."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.placement import Placement
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
