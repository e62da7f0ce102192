"""CreditDue: the credits loop runs a pass when a noted hold has ended or the sweep is due, else none."""

from __future__ import annotations

from coordinator.money.credit_due import CreditDue

LIMIT = 10


def _swept(due: CreditDue, at_ms: int, released: int = 0) -> CreditDue:
    assert due.due(at_ms)
    due.passed(at_ms, released, LIMIT)
    return due


def test_the_first_pass_sweeps_then_nothing_until_a_hold_ends_or_the_sweep_interval() -> None:
    due = _swept(CreditDue(sweep_ms=60_000), 1_000)
    assert not due.due(1_001) and not due.due(60_999)
    assert due.due(61_000)  # the sweep, for holds no receipt here noted


def test_a_noted_hold_makes_a_pass_due_when_it_ends_and_is_forgotten_after_it() -> None:
    due = _swept(CreditDue(sweep_ms=60_000), 1_000)
    due.note(5_000)
    due.note(3_000)
    assert not due.due(2_999)
    assert due.due(3_000)
    due.passed(3_000, 1, LIMIT)
    assert not due.due(4_999) and due.due(5_000)  # the later hold still counts
    due.passed(5_000, 1, LIMIT)
    assert not due.due(6_000)


def test_a_hold_noted_during_a_pass_that_began_before_it_ended_is_kept() -> None:
    due = _swept(CreditDue(sweep_ms=60_000), 1_000)
    due.note(2_000)
    started = 1_500  # the pass read the due credits before the hold ended
    due.passed(started, 0, LIMIT)
    assert due.due(2_000)


def test_a_pass_stopped_at_its_limit_makes_the_next_one_due_at_once() -> None:
    due = _swept(CreditDue(sweep_ms=60_000), 1_000, released=LIMIT)
    assert due.due(1_001)
    due.passed(1_001, 3, LIMIT)
    assert not due.due(1_002)


def test_holds_past_the_limit_are_left_to_the_sweep() -> None:
    due = _swept(CreditDue(sweep_ms=60_000, noted_max=2), 0)
    for hold in (50_000, 40_000, 1_000):
        due.note(hold)
    assert not due.due(1_000)  # the third was not kept
    assert due.due(40_000)
    assert due.due(60_000)  # and the sweep still finds it
