"""A peer's check result: canonical bytes that round-trip, and hostile bytes refused by name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.commitments import CANDIDATES, TopCandidates
from contracts.peer_checks import (
    CheckResult, CheckResultFormatError, decode_result, encode_result, result_digest, signing_bytes,
)
from contracts.token_checks import NO_TOKEN, TokenCheck

_ids = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
_problems = st.sampled_from(["", "not what the model samples", "an end token inside the output",
                             "claims the model ended here, but it would go on"])


@st.composite
def _chunk(draw: st.DrawFn) -> TopCandidates:
    count = draw(st.integers(0, 8))
    indices = tuple(draw(st.lists(st.integers(0, 2**40), min_size=count, max_size=count)))
    values = tuple(draw(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=count, max_size=count)))
    return TopCandidates(indices, values)


@st.composite
def _results(draw: st.DrawFn) -> CheckResult:
    steps = draw(st.integers(0, 6))
    checks = tuple(TokenCheck(step, draw(st.integers(NO_TOKEN, 50_000)), draw(st.booleans()),
                              draw(st.integers(NO_TOKEN, 50_000)), draw(_problems)) for step in range(steps))
    return CheckResult(draw(_ids), draw(_ids), "node-1", "m", "d" * 64,
                       bytes(32), bytes(range(32)), draw(st.integers(0, 2**32 - 1)), draw(_chunk()),
                       tuple(draw(st.lists(_chunk(), max_size=3))), checks)


@given(_results())
def test_a_result_round_trips_through_its_canonical_bytes(result: CheckResult) -> None:
    body = encode_result(result)
    assert decode_result(body) == result
    assert signing_bytes(body).endswith(body) and len(result_digest(body)) == 64


@given(_results(), st.data())
def test_altered_or_truncated_bytes_never_decode_to_anything_but_an_error_or_a_result(
        result: CheckResult, data: st.DataObject) -> None:
    body = bytearray(encode_result(result))
    cut = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(CheckResultFormatError):
        decode_result(bytes(body[:cut]))
    body[data.draw(st.integers(0, len(body) - 1))] ^= 0xFF
    try:
        decode_result(bytes(body))
    except CheckResultFormatError:
        pass


def test_a_chunk_with_more_values_than_any_replay_keeps_is_refused_by_name() -> None:
    big = TopCandidates(tuple(range(CANDIDATES + 1)), (1.0,) * (CANDIDATES + 1))
    small = TopCandidates((1,), (1.0,))
    body = encode_result(CheckResult("c", "j", "n", "m", "d", bytes(32), bytes(32), 1, small, (), ()))
    assert decode_result(body).prompt == small
    with pytest.raises(AssertionError):
        encode_result(CheckResult("c", "j", "n", "m", "d", bytes(32), bytes(32), 1, big, (), ()))
    forged = body.replace(b"\x00\x01" + (1).to_bytes(8, "big"), (CANDIDATES + 1).to_bytes(2, "big") + (1).to_bytes(8, "big"), 1)
    with pytest.raises(CheckResultFormatError, match=f"at most {CANDIDATES}"):
        decode_result(forged)
