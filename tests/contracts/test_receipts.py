from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.ids import JobId, NodeId
from contracts.receipts import (
    FinishReason, Receipt, ReceiptFormatError, decode_receipt, encode_receipt, output_digest,
    prompt_digest,
)

texts = st.text(max_size=64)
digests = st.binary(min_size=32, max_size=32)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
finite = st.floats(allow_nan=False, allow_infinity=False)

receipts = st.builds(
    Receipt, job_id=texts.map(JobId), node_id=texts.map(NodeId), model_id=texts,
    weights_digest=texts, prompt_digest=digests, temperature=finite, top_p=finite, seed=u64,
    max_tokens=u32, output_digest=digests, prompt_tokens=u32, completion_tokens=u32,
    started_at_ms=u64, finished_at_ms=u64, activation_commitment=st.binary(max_size=300),
    finish_reason=st.sampled_from(FinishReason), first_token_at_ms=u64)
version_1_receipts = st.builds(
    Receipt, job_id=texts.map(JobId), node_id=texts.map(NodeId), model_id=texts,
    weights_digest=texts, prompt_digest=digests, temperature=finite, top_p=finite, seed=u64,
    max_tokens=u32, output_digest=digests, prompt_tokens=u32, completion_tokens=u32,
    started_at_ms=u64, finished_at_ms=u64, version=st.just(1))


@given(receipts)
def test_encoding_round_trips(receipt: Receipt) -> None:
    assert decode_receipt(encode_receipt(receipt)) == receipt


@given(receipts)
def test_encoding_is_canonical(receipt: Receipt) -> None:
    assert encode_receipt(decode_receipt(encode_receipt(receipt))) == encode_receipt(receipt)


@given(version_1_receipts)
def test_version_1_receipts_still_decode(receipt: Receipt) -> None:
    encoded = encode_receipt(receipt)
    assert encoded[4] == 1
    assert decode_receipt(encoded) == receipt


def test_version_2_is_what_nodes_sign_and_carries_the_finish_reason() -> None:
    receipt = _receipt()
    assert receipt.version == 2 and encode_receipt(receipt)[4] == 2
    ended = Receipt(**{**vars(receipt), "finish_reason": FinishReason.END_TOKEN})
    assert decode_receipt(encode_receipt(ended)).finish_reason is FinishReason.END_TOKEN


def test_unknown_finish_reason_is_rejected() -> None:
    data = bytearray(encode_receipt(_receipt()))
    reason_offset = len(data) - 4 - 8 * 3 - 1  # before the timings and the empty commitment
    data[reason_offset] = 9
    with pytest.raises(ReceiptFormatError, match="finish reason 9"):
        decode_receipt(bytes(data))


@given(st.binary(max_size=400))
def test_arbitrary_bytes_decode_or_raise_format_error(data: bytes) -> None:
    try:
        decode_receipt(data)
    except ReceiptFormatError:
        pass


def _receipt() -> Receipt:
    return Receipt(JobId("job-1"), NodeId("node-1"), "m", "w", prompt_digest("hi"), 0.0, 1.0, 7,
                   16, output_digest([1, 2, 3]), 2, 3, 10, 20)


def test_trailing_bytes_are_rejected() -> None:
    with pytest.raises(ReceiptFormatError, match="trailing"):
        decode_receipt(encode_receipt(_receipt()) + b"\x00")


def test_truncation_is_rejected() -> None:
    with pytest.raises(ReceiptFormatError, match="truncated"):
        decode_receipt(encode_receipt(_receipt())[:-1])


def test_unknown_version_is_rejected() -> None:
    data = bytearray(encode_receipt(_receipt()))
    data[4] = 3
    with pytest.raises(ReceiptFormatError, match="version 3"):
        decode_receipt(bytes(data))


def test_output_digest_depends_on_order() -> None:
    assert output_digest([1, 2]) != output_digest([2, 1])
    assert output_digest([]) != output_digest([0])
