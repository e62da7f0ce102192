"""Which coordinator a node or consumer tries next, and how long it waits (contracts/failover.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.failover import (
    ADDRESSES_MAX,
    DELAY_S_MAX,
    DELAY_S_MIN,
    NEXT_ADDRESS_DELAY_S_MAX,
    Rotation,
    after_failure,
    after_success,
    parse_addresses,
    parse_fingerprints,
)

PIN_A = "SHA256:" + ":".join(["AB"] * 32)
PIN_B = "SHA256:" + ":".join(["CD"] * 32)


def test_addresses_are_split_on_commas_in_order() -> None:
    assert parse_addresses("a.example:443, 10.0.0.2:50051,[::1]:7") == (
        "a.example:443", "10.0.0.2:50051", "[::1]:7")
    assert parse_addresses("127.0.0.1:1") == ("127.0.0.1:1",)


@pytest.mark.parametrize(("text", "named"), [
    ("", "at least one"), (" , ", "at least one"), ("a:1,a:1", "twice"), ("a:1,b", "HOST:PORT"),
    (",".join(f"h{n}:1" for n in range(ADDRESSES_MAX + 1)), f"at most {ADDRESSES_MAX}"),
])
def test_bad_address_lists_are_refused_naming_the_fault(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_addresses(text)


def test_one_fingerprint_pins_every_address_and_several_pin_one_each() -> None:
    addresses = ("a:1", "b:2")
    assert parse_fingerprints("", addresses) == {}
    assert parse_fingerprints(PIN_A.lower(), addresses) == {"a:1": PIN_A, "b:2": PIN_A}
    assert parse_fingerprints(f"{PIN_A},{PIN_B}", addresses) == {"a:1": PIN_A, "b:2": PIN_B}
    with pytest.raises(ValueError, match="2 coordinators"):
        parse_fingerprints(f"{PIN_A},{PIN_B},{PIN_A}", addresses)
    with pytest.raises(ValueError, match="64 hex digits"):
        parse_fingerprints("SHA256:nothex", addresses)


def test_a_failure_moves_on_at_once_and_backs_off_only_after_a_full_round() -> None:
    rotation = Rotation(("a:1", "b:1", "c:1"))
    rotation, wait_s = after_failure(rotation, 0.99)
    assert rotation.address == "b:1" and wait_s < NEXT_ADDRESS_DELAY_S_MAX
    rotation, wait_s = after_failure(rotation, 0.99)
    assert rotation.address == "c:1" and wait_s < NEXT_ADDRESS_DELAY_S_MAX
    rotation, wait_s = after_failure(rotation, 0.0)
    assert rotation.address == "a:1" and wait_s == DELAY_S_MIN / 2
    assert after_success(rotation) == Rotation(("a:1", "b:1", "c:1"), current=0)


@given(st.integers(1, 6), st.integers(0, 50), st.lists(st.floats(0, 1, exclude_max=True),
                                                        min_size=1, max_size=60))
def test_every_address_is_tried_once_per_round_and_waits_stay_bounded(
        count: int, start: int, draws: list[float]) -> None:
    addresses = tuple(f"h{n}:1" for n in range(count))
    rotation = Rotation(addresses).starting_at(start)
    tried = [rotation.address]
    for draw in draws:
        rotation, wait_s = after_failure(rotation, draw)
        assert 0 <= wait_s <= DELAY_S_MAX
        tried.append(rotation.address)
    for round_start in range(0, len(tried) - count + 1, count):
        assert sorted(tried[round_start:round_start + count]) == sorted(addresses)
