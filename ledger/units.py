"""The MLX token in integer base units ("nano-MLX"), and exact text conversions.

Money never passes through a float: amounts are ints of base units, and text is
parsed digit by digit.
"""

from __future__ import annotations

import re

MLX_DECIMALS = 9
BASE_UNITS_PER_MLX = 10**MLX_DECIMALS  # 1 MLX = 1_000_000_000 base units

# Every stored amount and balance field is a signed 64-bit BigInteger, exact on both
# SQLite and PostgreSQL; this caps any single balance at about 9.22 billion MLX.
AMOUNT_MAX = 2**63 - 1

MLX_SUFFIX = " MLX"
_MLX_TEXT = re.compile(r"^(-?)(\d{1,19})(?:\.(\d{1,%d}))?$" % MLX_DECIMALS)


def format_mlx(amount: int) -> str:
    """Render base units as MLX with all nine decimals, e.g. 1234567890 -> "1.234567890 MLX"."""
    assert type(amount) is int, f"amounts are ints of base units, not {type(amount).__name__}"
    sign = "-" if amount < 0 else ""
    whole, fraction = divmod(abs(amount), BASE_UNITS_PER_MLX)
    return f"{sign}{whole}.{fraction:0{MLX_DECIMALS}d}{MLX_SUFFIX}"


def parse_mlx(text: str) -> int:
    """Parse "1.5" or "1.5 MLX" into base units; refuse text that would lose a digit.

    Raises ValueError for malformed text, more than nine decimals, or magnitudes
    beyond AMOUNT_MAX, since those come from people and config files.
    """
    assert isinstance(text, str), "parse_mlx takes text; never pass a float"
    body = text.strip()
    if body.endswith(MLX_SUFFIX.strip()):
        body = body[: -len(MLX_SUFFIX.strip())].rstrip()
    match = _MLX_TEXT.match(body)
    if match is None:
        raise ValueError(
            f"not an MLX amount: {text!r} (use digits with at most {MLX_DECIMALS} decimals)"
        )
    sign, whole, fraction = match.group(1), match.group(2), match.group(3) or ""
    magnitude = int(whole) * BASE_UNITS_PER_MLX + int(fraction.ljust(MLX_DECIMALS, "0"))
    if magnitude > AMOUNT_MAX:
        raise ValueError(f"MLX amount too large: {text!r} exceeds {format_mlx(AMOUNT_MAX)}")
    return -magnitude if sign else magnitude
