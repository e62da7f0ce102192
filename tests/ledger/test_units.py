from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.units import AMOUNT_MAX, BASE_UNITS_PER_MLX, format_mlx, parse_mlx


def test_one_mlx_is_a_billion_base_units() -> None:
    assert BASE_UNITS_PER_MLX == 10**9
    assert parse_mlx("1") == BASE_UNITS_PER_MLX


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (0, "0.000000000 MLX"),
        (1, "0.000000001 MLX"),
        (1_234_567_890, "1.234567890 MLX"),
        (-1_500_000_000, "-1.500000000 MLX"),
        (AMOUNT_MAX, "9223372036.854775807 MLX"),
    ],
)
def test_format_mlx_keeps_every_digit(amount: int, text: str) -> None:
    assert format_mlx(amount) == text


@pytest.mark.parametrize(
    ("text", "amount"),
    [("1.5", 1_500_000_000), ("1.5 MLX", 1_500_000_000), (" 0.000000001 ", 1), ("-2", -2 * 10**9), ("7.", None)],
)
def test_parse_mlx(text: str, amount: int | None) -> None:
    if amount is None:
        with pytest.raises(ValueError):
            parse_mlx(text)
    else:
        assert parse_mlx(text) == amount


@pytest.mark.parametrize("text", ["", "1.0000000001", "1e9", "one", "1,5", "9223372036.854775808", "+1"])
def test_parse_mlx_refuses_text_that_would_lose_or_invent_digits(text: str) -> None:
    with pytest.raises(ValueError):
        parse_mlx(text)


def test_floats_are_refused() -> None:
    with pytest.raises(AssertionError):
        format_mlx(1.5)  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        parse_mlx(1.5)  # type: ignore[arg-type]


@given(st.integers(min_value=-AMOUNT_MAX, max_value=AMOUNT_MAX))
def test_format_then_parse_is_the_identity(amount: int) -> None:
    assert parse_mlx(format_mlx(amount)) == amount
