"""Explanation and Placement write their __init__ out (for speed); it must stay the dataclass's."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from coordinator.placement import Placement
from coordinator.placement.explain import Explanation
from tests.coordinator.placement.harness import M4_MAX, QWEN3_4B_4BIT, Fleet, job, must_place


@pytest.mark.parametrize("cls", [Explanation, Placement])
def test_the_written_init_takes_the_fields_in_order_with_their_defaults(cls) -> None:
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = dataclasses.fields(cls)
    assert [p.name for p in parameters] == [f.name for f in fields]
    assert [p.default for p in parameters] == [
        inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default for f in fields]


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
