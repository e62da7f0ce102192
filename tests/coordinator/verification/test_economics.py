"""Cheating never pays under the default policy: the inequality in economics.py, checked over
the work a cheat saves, its detection per check, the node's pace and its habits."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.verification.economics import (
    Cheater, Exposure, StakePolicy, check_rate_for_job, checker_fee_bps, checker_profit, choose_forfeits,
    expected_profit, own_fee, planted_rate, replay_cost, stake_rate, window_floor_rate,
)
from coordinator.verification.policy import TrustPolicy

POLICY = TrustPolicy()
STAKE = POLICY.stake
CREDIT = 1_000_000

work_saved = st.floats(min_value=1e-6, max_value=1.0)
detection = st.floats(min_value=STAKE.detection_min, max_value=1.0)
paces = st.one_of(st.floats(min_value=0.0, max_value=5.0), st.floats(min_value=5.0, max_value=100_000.0))
trust_rates = st.sampled_from([POLICY.rate_min, 0.05, 0.2, 1.0])
job_sizes = st.floats(min_value=0.01, max_value=1_000.0)
habits = st.sampled_from([None, 1.0])  # every job, or once per window


@settings(max_examples=500)
@given(work_saved, detection, paces, trust_rates, job_sizes, habits)
def test_no_cheat_pays_under_the_default_policy(f: float, p: float, pace: float, trust_rate: float,
                                               size: float, habit: float | None) -> None:
    cheater = Cheater(pace, trust_rate, size, habit)
    profit = expected_profit(f, p, STAKE, cheater)
    assert profit.per_cheat < 0 and profit.until_caught < 0
    assert profit.per_window <= 0 and (pace == 0 or profit.per_window < 0)


@pytest.mark.parametrize("pace", [0.5, 1, 3, 9])  # a slow node: under 10 jobs an hour
def test_a_slow_trusted_node_was_profitable_at_the_trust_rate_alone_and_is_not_now(pace: float) -> None:
    profit = expected_profit(1.0, STAKE.detection_min, STAKE, Cheater(pace, POLICY.rate_min))
    at_trust_rate_only = profit.gain - POLICY.rate_min * STAKE.detection_min * profit.loss
    assert at_trust_rate_only > 0  # the arithmetic the issue found: a slow node profits
    assert profit.per_cheat < 0 and profit.check_rate > POLICY.rate_min


def test_a_once_per_window_cheater_on_a_fast_node_loses_its_stake() -> None:
    profit = expected_profit(1.0, STAKE.detection_min, STAKE, Cheater(1_000, POLICY.rate_min, cheats_per_window=1))
    assert profit.check_rate == POLICY.rate_min  # its stake is large: the trust rate is enough
    assert profit.loss > 400 * CREDIT and profit.per_window == profit.per_cheat < 0


def test_a_fresh_node_is_checked_on_every_job_and_a_staked_one_less() -> None:
    assert stake_rate(Exposure(CREDIT, 0, 0), STAKE) == 1.0
    staked = stake_rate(Exposure(CREDIT, 100 * CREDIT, 100), STAKE)
    assert staked == pytest.approx(1.25 * 0.4 * CREDIT / (0.5 * (CREDIT + 50 * CREDIT)))
    assert stake_rate(Exposure(100 * CREDIT, 100 * CREDIT, 100), STAKE) > staked  # a big job, checked more
    assert stake_rate(Exposure(0, 0, 0), STAKE) == 0.0  # nothing paid, nothing gained


def test_the_window_floor_checks_a_slow_node_about_twice_a_window() -> None:
    assert window_floor_rate(Exposure(CREDIT, 0, 0), STAKE) == 1.0
    assert window_floor_rate(Exposure(CREDIT, 0, 1), STAKE) == 1.0
    assert window_floor_rate(Exposure(CREDIT, 0, 9), STAKE) == pytest.approx(0.2)
    rate = check_rate_for_job(0.02, Exposure(CREDIT, 10**12, 99), STAKE)
    assert rate == pytest.approx(0.02)  # a fast node with a large stake: the floor and stake ask less


@given(st.lists(st.integers(0, 10**9), max_size=30), st.integers(0, 10**10))
def test_forfeits_void_whole_credits_newest_first_until_the_share_is_reached(credits: list[int],
                                                                            amount: int) -> None:
    held = [(f"job-{n}", credit) for n, credit in enumerate(credits)]
    chosen = choose_forfeits(held, amount)
    assert chosen == [job_id for job_id, _ in held[:len(chosen)]]  # a prefix: newest first
    total = sum(credit for _, credit in held[:len(chosen)])
    assert total >= amount or len(chosen) == len(held)
    assert not chosen or sum(credit for _, credit in held[:len(chosen) - 1]) < amount  # none more than needed


def test_a_policy_where_a_first_job_cheat_would_pay_is_refused() -> None:
    with pytest.raises(AssertionError, match="kappa < p_min"):
        StakePolicy(detection_min=0.3, work_cost_share_max=0.4)


# --- checkers -----------------------------------------------------------------------------

@given(st.integers(100, 10**15))
def test_an_honest_checker_earns_more_than_its_replays_cost_at_the_least_planting(credit: int) -> None:
    found = checker_profit(credit, 10**18, STAKE)  # much at stake: planted at planted_share_min
    assert found.planted_rate == STAKE.planted_share_min
    assert found.honest > 0


@given(st.integers(1, 10**12), st.integers(0, 10**15), st.integers(0, 10**15))
def test_the_planted_rate_stays_in_bounds_and_falls_with_the_stake(credit: int, stake: int, more: int) -> None:
    rate = planted_rate(credit, stake, STAKE)
    assert STAKE.planted_share_min <= rate <= STAKE.planted_per_check_max
    assert planted_rate(credit, stake + more, STAKE) <= rate


@given(st.integers(1_000, 10**12), st.one_of(st.just(0), st.integers(0, 10**15)))
def test_laziness_loses_money_at_every_stake_even_none(credit: int, stake: int) -> None:
    """The inequality of economics.py: q * (S + fee) >= margin * C for every S >= 0, so a lazy
    answer's expected profit C - q * (S + fee) is negative; integer fees round it by a unit."""
    found = checker_profit(credit, stake, STAKE)
    assert found.lazy < 0
    assert found.lazy_loss == stake + own_fee(credit, STAKE)
    assert found.lazy_caught * found.lazy_loss >= STAKE.margin * found.lazy_gain - 1
    if stake == 0:  # nothing at stake: a planted check with every real one
        assert found.planted_rate == pytest.approx(STAKE.planted_per_check_max) == 1.0
        assert found.lazy <= (1 - STAKE.margin) * found.lazy_gain + 1


@given(st.integers(1_000, 10**12))
def test_an_honest_checker_earns_more_than_its_replays_cost_even_at_the_most_planting(credit: int) -> None:
    found = checker_profit(credit, 0, STAKE)
    assert found.planted_rate == pytest.approx(STAKE.planted_per_check_max) and found.honest > 0


def test_a_policy_where_laziness_pays_at_zero_stake_is_refused() -> None:
    with pytest.raises(AssertionError, match="nothing at stake"):
        StakePolicy(planted_per_check_max=0.5)


def test_the_fee_is_derived_from_the_stake_policy() -> None:
    assert checker_fee_bps(STAKE) == 1_500  # 1.25 x (1 + 1) x 0.15 x 0.4
    cheaper = StakePolicy(check_cost_share=0.075)
    assert checker_fee_bps(cheaper) == 750


def test_the_default_fee_fits_inside_a_jobs_network_share() -> None:
    """The network fee is 15/85 of the operator credit (1764 bps, floored): the fee is below it,
    so the cap in peers.check_fee is a guard, not what sets it."""
    share = 10_000 * (10_000 - 8_500) // 8_500
    assert checker_fee_bps(STAKE) < share == 1_764
