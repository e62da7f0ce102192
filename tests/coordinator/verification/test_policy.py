"""The check-rate policy: all of a new node's first jobs, falling with honest history, up after a failure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.verification.policy import (
    TrustPolicy,
    TrustRecord,
    check_rate,
    is_quarantined,
    reputation,
    should_check,
)

POLICY = TrustPolicy()


def test_a_new_nodes_first_jobs_are_all_checked() -> None:
    assert [check_rate(TrustRecord(passed, 0), POLICY) for passed in range(10)] == [1.0] * 10


def test_honest_history_lowers_the_rate_to_the_floor() -> None:
    rates = [check_rate(TrustRecord(passed, 0), POLICY) for passed in range(10, 60)]
    assert rates == sorted(rates, reverse=True)
    assert rates[0] < 0.2 and rates[-1] == POLICY.rate_min


def _history(outcomes: list[bool]) -> TrustRecord:
    record = TrustRecord()
    for passed in outcomes:
        record = record.after(passed)
    return record


def test_a_failure_sends_the_rate_back_to_one_even_after_a_long_honest_run() -> None:
    veteran = _history([True] * 200)
    assert check_rate(veteran, POLICY) == POLICY.rate_min
    turned = veteran.after(False)
    assert check_rate(turned, POLICY) == 1.0
    assert check_rate(_history([True] * 200 + [False] + [True] * 20), POLICY) == 1.0
    assert check_rate(_history([True] * 200 + [False] + [True] * 80), POLICY) == POLICY.rate_min


def test_repeated_failures_quarantine() -> None:
    assert not is_quarantined(_history([True] * 50 + [False]), POLICY)
    twice = _history([True] * 50 + [False, True, False])
    assert is_quarantined(twice, POLICY)
    assert reputation(twice, POLICY) < 0.01 < 0.99 < reputation(_history([True] * 50), POLICY)


@given(st.lists(st.booleans(), max_size=300), st.booleans())
def test_rate_is_a_share_and_moves_the_right_way(outcomes: list[bool], failed_last: bool) -> None:
    record = _history(outcomes)
    rate = check_rate(record, POLICY)
    assert POLICY.rate_min <= rate <= 1.0
    if record.checks_passed + record.checks_failed >= POLICY.new_node_checks:
        assert check_rate(record.after(True), POLICY) <= rate
    assert check_rate(record.after(False), POLICY) == 1.0
    assert 0.0 <= reputation(record, POLICY) <= 1.0


def test_the_draw_decides() -> None:
    assert should_check(1.0, 0.999) and should_check(0.05, 0.04) and not should_check(0.05, 0.05)
