"""The one table of limits, its checks, and how a client's value is shown in logs and errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import limits
from contracts.limits import FIELD_LIMITS, Limit, LimitExceeded, ascii_int, shown
from protos.mlxnet.v1 import common_pb2, job_pb2, node_pb2

_FILES = (common_pb2.DESCRIPTOR, job_pb2.DESCRIPTOR, node_pb2.DESCRIPTOR)


def _proto_fields() -> set[str]:
    return {f"{message.name}.{field.name}" for file in _FILES
            for message in file.message_types_by_name.values() for field in message.fields}


def test_every_limit_names_a_field_that_exists() -> None:
    assert set(FIELD_LIMITS) - _proto_fields() == set()


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_number_that_is_not_finite_is_refused_naming_field_and_limit(value: float) -> None:
    with pytest.raises(LimitExceeded) as refused:
        limits.check_number("hardware.memory_bandwidth_gb_s", value,
                            FIELD_LIMITS["Hardware.memory_bandwidth_gb_s"])
    assert str(refused.value).startswith("hardware.memory_bandwidth_gb_s must be a finite number "
                                         "0 or from 0.01 to 10000")
    assert refused.value.field == "hardware.memory_bandwidth_gb_s"


def test_zero_means_unknown_where_a_field_allows_it() -> None:
    limit = FIELD_LIMITS["Hardware.memory_bandwidth_gb_s"]
    limits.check_number("bandwidth", 0.0, limit)
    with pytest.raises(LimitExceeded, match=r"must be 0 or from 0.01 to 10000; got 5e-324"):
        limits.check_number("bandwidth", 5e-324, limit)  # a log2 of it once broke placement


def test_a_number_out_of_range_names_the_range() -> None:
    with pytest.raises(LimitExceeded, match=r"gpu_cores must be from 0 to 1024; got -7"):
        limits.check_number("gpu_cores", -7, FIELD_LIMITS["Hardware.gpu_cores"])
    limits.check_number("gpu_cores", 80, FIELD_LIMITS["Hardware.gpu_cores"])


def test_text_is_bounded_valid_and_on_one_line_unless_multiline() -> None:
    one_line, multiline = Limit(chars_max=8), Limit(chars_max=8, multiline=True)
    with pytest.raises(LimitExceeded, match="chip is 9 characters; the limit is 8"):
        limits.check_text("chip", "x" * 9, one_line, 8)
    with pytest.raises(LimitExceeded, match="lone surrogate"):
        limits.check_text("content", "x\ud800y", multiline, 8)
    with pytest.raises(LimitExceeded, match="control characters or line breaks"):
        limits.check_text("chip", "M4\nroot", one_line, 8)
    with pytest.raises(LimitExceeded, match="control characters"):
        limits.check_text("prompt", "a\x00b", multiline, 8)
    limits.check_text("prompt", "a\nb\tc", multiline, 8)
    limits.check_text("chip", "Apple M4", one_line, 8)


def test_a_list_is_bounded() -> None:
    with pytest.raises(LimitExceeded, match="links holds 50000 items; the limit is 32"):
        limits.check_count("links", 50_000, limits.THUNDERBOLT_LINKS_MAX)


@pytest.mark.parametrize("text", ["²", "٣", "１", "-1", "1e3", " 1", "", "1" * 19, "0x10"])
def test_only_ascii_digits_spell_a_number(text: str) -> None:
    assert ascii_int(text) is None


def test_ascii_digits_spell_their_number() -> None:
    assert ascii_int("0") == 0 and ascii_int("42") == 42 and ascii_int("9" * 18) == int("9" * 18)


def test_a_newline_in_a_value_cannot_start_a_log_line() -> None:
    forged = "Apple M4\n2026-01-01 00:00:00 INFO coordinator: node-admin granted"
    assert "\n" not in shown(forged)
    assert shown(forged).startswith("Apple M4\\n2026")


def test_a_huge_value_is_cut_and_says_how_long_it_was() -> None:
    huge = "m" * (4 << 20)
    assert shown(huge) == "m" * limits.LOGGED_CHARS_MAX + f"... ({4 << 20} characters)"


@given(st.text())
def test_shown_is_always_one_printable_bounded_line(text: str) -> None:
    line = shown(text, 50)
    assert line.isprintable() and limits.is_valid_text(line)
    assert len(line) <= 50 * 10 + 40  # each character at most \U0010ffff, plus the length note


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Cn", "Co", "Cf",
                                                            "Zs")).filter(lambda c: c != "\\")))
def test_shown_leaves_printable_text_as_it_is(text: str) -> None:
    assert shown(text, len(text)) == text
