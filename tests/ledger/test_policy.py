from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.policy import (
    DEFAULT_POLICY,
    PARAMETER_COUNT_MAX,
    POLICY_VERSION,
    TOKENS_PER_JOB_MAX,
    JobPrice,
    SizeClass,
    max_job_charge,
    price_job,
    size_class,
)
from ledger.units import parse_mlx

BILLION = 10**9

parameter_counts = st.integers(min_value=1, max_value=PARAMETER_COUNT_MAX)
token_counts = st.integers(min_value=0, max_value=TOKENS_PER_JOB_MAX)


@pytest.mark.parametrize(
    ("parameter_count", "expected"),
    [
        (1, SizeClass.UP_TO_3B),
        (3 * BILLION, SizeClass.UP_TO_3B),
        (3 * BILLION + 1, SizeClass.UP_TO_14B),
        (14 * BILLION, SizeClass.UP_TO_14B),
        (70 * BILLION, SizeClass.UP_TO_70B),
        (70 * BILLION + 1, SizeClass.UP_TO_400B),
        (400 * BILLION, SizeClass.UP_TO_400B),
        (1_000 * BILLION, SizeClass.OVER_400B),
    ],
)
def test_size_class_bounds_are_inclusive(parameter_count: int, expected: SizeClass) -> None:
    assert size_class(parameter_count) is expected


def test_price_of_a_small_model_job() -> None:
    # 4B parameters: 0.08 MLX per million prompt tokens, 0.24 per million generated.
    price = price_job(4 * BILLION, prompt_tokens=2_048, completion_tokens=128)
    assert price.consumer_charge == 2_048 * 80 + 128 * 240 == 194_560
    assert price.operator_credit == 194_560 * 8_500 // 10_000 == 165_376
    assert price.network_fee == 29_184
    assert price.policy_version == POLICY_VERSION


def test_charge_rounds_down_and_the_fee_takes_the_dust() -> None:
    cheap = replace(
        DEFAULT_POLICY,
        class_prices=tuple(
            replace(price, prompt_price_per_million_tokens=1, completion_price_per_million_tokens=3)
            for price in DEFAULT_POLICY.class_prices
        ),
    )
    assert price_job(BILLION, 999_999, 0, cheap).consumer_charge == 0  # 0.999999 base units
    price = price_job(BILLION, 1_000_000, 1_000_000, cheap)  # exactly 4 base units
    assert (price.consumer_charge, price.operator_credit, price.network_fee) == (4, 3, 1)


def test_dedicated_ultra_seat_bonus_comes_from_the_fee_not_the_consumer() -> None:
    plain = price_job(70 * BILLION, 10_000, 1_000)
    dedicated = price_job(70 * BILLION, 10_000, 1_000, dedicated_ultra_seat=True)
    assert dedicated.consumer_charge == plain.consumer_charge
    assert dedicated.operator_credit == plain.consumer_charge * 9_350 // 10_000
    assert dedicated.operator_credit > plain.operator_credit


def test_bonus_never_pays_more_than_the_charge() -> None:
    generous = replace(DEFAULT_POLICY, operator_share_bps=9_500, dedicated_ultra_bonus_bps=10_000)
    price = price_job(BILLION, 1_000, 1_000, generous, dedicated_ultra_seat=True)
    assert price.operator_credit == price.consumer_charge and price.network_fee == 0


def test_zero_tokens_cost_nothing() -> None:
    assert price_job(BILLION, 0, 0) == JobPrice(0, 0, 0, POLICY_VERSION)


def test_prices_are_whole_base_units_from_decimal_text() -> None:
    assert DEFAULT_POLICY.class_prices[0].prompt_price_per_million_tokens == parse_mlx("0.02")


@pytest.mark.parametrize(("prompt_tokens", "completion_tokens"), [(-1, 0), (0, TOKENS_PER_JOB_MAX + 1)])
def test_token_counts_are_bounded(prompt_tokens: int, completion_tokens: int) -> None:
    with pytest.raises(AssertionError):
        price_job(BILLION, prompt_tokens, completion_tokens)


def test_job_price_must_split_exactly() -> None:
    with pytest.raises(AssertionError):
        JobPrice(consumer_charge=10, operator_credit=8, network_fee=1, policy_version=POLICY_VERSION)


@given(parameter_counts, token_counts, token_counts, st.booleans())
def test_charge_always_splits_exactly(parameter_count: int, prompt: int, completion: int, dedicated: bool) -> None:
    price = price_job(parameter_count, prompt, completion, dedicated_ultra_seat=dedicated)
    assert price.consumer_charge == price.operator_credit + price.network_fee
    assert 0 <= price.network_fee <= price.consumer_charge
    assert type(price.consumer_charge) is int


@given(parameter_counts, token_counts, token_counts, token_counts, st.booleans())
def test_max_job_charge_covers_every_finished_job(
    parameter_count: int, prompt: int, max_tokens: int, completion: int, dedicated: bool
) -> None:
    completion = min(completion, max_tokens)
    reserved = max_job_charge(parameter_count, prompt, max_tokens)
    price = price_job(parameter_count, prompt, completion, dedicated_ultra_seat=dedicated)
    assert price.consumer_charge <= reserved


@given(parameter_counts, parameter_counts, token_counts, token_counts)
def test_bigger_models_never_cost_less(small: int, large: int, prompt: int, completion: int) -> None:
    small, large = sorted((small, large))
    assert price_job(small, prompt, completion).consumer_charge <= price_job(large, prompt, completion).consumer_charge
