"""Completion receipts and their canonical byte encoding (versions 1 and 2).

A receipt is what a node signs when it finishes a job. The bytes signed are
the canonical encoding below, so any party can re-derive and check them.
Version 2 (what nodes sign now):

    b"MLXR" | u8 version=2 |
    str job_id | str node_id | str model_id | str weights_digest |
    bytes32 prompt_digest |
    f64 temperature | f64 top_p | u64 seed | u32 max_tokens |
    bytes32 output_digest | u32 prompt_tokens | u32 completion_tokens |
    u8 finish_reason |
    u64 started_at_ms | u64 first_token_at_ms | u64 finished_at_ms |
    bytes activation_commitment

A node may sign partial receipts as it goes: the same encoding with finish_reason
CUT_OFF, over the first completion_tokens tokens and the commitment to them, so work
cut off by a fault (the node dies, the consumer leaves) can still be proven and paid.

Version 1 (still decoded, for receipts stored before proofs) lacks finish_reason
and first_token_at_ms and carries an empty activation commitment. In version 2
the commitment is `contracts.commitments`' encoding, and the sampler is the one
in `contracts.sampling`, seeded with `seed`.

`str` and `bytes` are a big-endian u32 length followed by the UTF-8 or raw
bytes; integers and f64 (IEEE-754) are big-endian. Nothing may follow the
last field.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from contracts.ids import JobId, NodeId

MAGIC = b"MLXR"
RECEIPT_VERSION = 2
RECEIPT_VERSIONS = (1, 2)
DIGEST_BYTES = 32
_FIELD_BYTES_MAX = 1 << 20  # no single field is larger than 1 MiB


class ReceiptFormatError(ValueError):
    """The bytes are not a canonical receipt of a known version."""


class FinishReason(IntEnum):
    LENGTH = 0  # max_tokens reached
    END_TOKEN = 1  # the model sampled an end-of-sequence token (not part of the output)
    CUT_OFF = 2  # a partial receipt: the job was still running after these tokens


def is_partial(receipt: Receipt) -> bool:
    """A receipt signed mid-job over the tokens made so far: it proves them, not an end."""
    return receipt.finish_reason is FinishReason.CUT_OFF


@dataclass(frozen=True)
class Receipt:
    job_id: JobId
    node_id: NodeId
    model_id: str
    weights_digest: str
    prompt_digest: bytes
    temperature: float
    top_p: float
    seed: int
    max_tokens: int
    output_digest: bytes
    prompt_tokens: int
    completion_tokens: int
    started_at_ms: int
    finished_at_ms: int
    activation_commitment: bytes = b""
    finish_reason: FinishReason = FinishReason.LENGTH
    first_token_at_ms: int = 0
    version: int = RECEIPT_VERSION

    def __post_init__(self) -> None:
        assert self.version in RECEIPT_VERSIONS
        assert self.version > 1 or (self.finish_reason == FinishReason.LENGTH
                                    and self.first_token_at_ms == 0), "version 1 has no such fields"
        assert len(self.prompt_digest) == DIGEST_BYTES
        assert len(self.output_digest) == DIGEST_BYTES
        assert self.prompt_tokens >= 0 and self.completion_tokens >= 0
        assert 0 <= self.seed < 1 << 64


def prompt_digest(prompt: str) -> bytes:
    return hashlib.sha256(prompt.encode("utf-8")).digest()


def output_digest(token_ids: Iterable[int]) -> bytes:
    """sha256 over the generated token ids, each a big-endian u32."""
    hasher = hashlib.sha256()
    for token_id in token_ids:
        hasher.update(struct.pack(">I", token_id))
    return hasher.digest()


def _pack_bytes(value: bytes) -> bytes:
    assert len(value) <= _FIELD_BYTES_MAX
    return struct.pack(">I", len(value)) + value


def encode_receipt(receipt: Receipt) -> bytes:
    if receipt.version == 2:
        counts = struct.pack(">IIBQQQ", receipt.prompt_tokens, receipt.completion_tokens,
                             receipt.finish_reason, receipt.started_at_ms,
                             receipt.first_token_at_ms, receipt.finished_at_ms)
    else:
        counts = struct.pack(">IIQQ", receipt.prompt_tokens, receipt.completion_tokens,
                             receipt.started_at_ms, receipt.finished_at_ms)
    parts = [
        MAGIC,
        struct.pack(">B", receipt.version),
        _pack_bytes(receipt.job_id.encode()),
        _pack_bytes(receipt.node_id.encode()),
        _pack_bytes(receipt.model_id.encode()),
        _pack_bytes(receipt.weights_digest.encode()),
        receipt.prompt_digest,
        struct.pack(">ddQI", receipt.temperature, receipt.top_p, receipt.seed, receipt.max_tokens),
        receipt.output_digest,
        counts,
        _pack_bytes(receipt.activation_commitment),
    ]
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._offset = 0

    def take(self, size: int) -> bytes:
        if size < 0 or self._offset + size > len(self._data):
            raise ReceiptFormatError("receipt is truncated")
        chunk = self._data[self._offset:self._offset + size]
        self._offset += size
        return chunk

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def take_sized(self) -> bytes:
        (size,) = self.unpack(">I")
        if size > _FIELD_BYTES_MAX:
            raise ReceiptFormatError("receipt field is too large")
        return self.take(size)

    def take_text(self) -> str:
        try:
            return self.take_sized().decode("utf-8")
        except UnicodeDecodeError as error:
            raise ReceiptFormatError("receipt text field is not UTF-8") from error

    def finish(self) -> None:
        if self._offset != len(self._data):
            raise ReceiptFormatError("receipt has trailing bytes")


def decode_receipt(data: bytes) -> Receipt:
    reader = _Reader(data)
    if reader.take(len(MAGIC)) != MAGIC:
        raise ReceiptFormatError("not a receipt: bad magic bytes")
    (version,) = reader.unpack(">B")
    if version not in RECEIPT_VERSIONS:
        raise ReceiptFormatError(f"unsupported receipt version {version}")
    job_id, node_id = JobId(reader.take_text()), NodeId(reader.take_text())
    model_id, weights_digest = reader.take_text(), reader.take_text()
    prompt = reader.take(DIGEST_BYTES)
    temperature, top_p, seed, max_tokens = reader.unpack(">ddQI")
    output = reader.take(DIGEST_BYTES)
    finish_reason, first_token = FinishReason.LENGTH, 0
    if version == 2:
        prompt_tokens, completion_tokens, reason, started, first_token, finished = \
            reader.unpack(">IIBQQQ")
        try:
            finish_reason = FinishReason(reason)
        except ValueError as error:
            raise ReceiptFormatError(f"unknown finish reason {reason}") from error
    else:
        prompt_tokens, completion_tokens, started, finished = reader.unpack(">IIQQ")
    commitment = reader.take_sized()
    reader.finish()
    return Receipt(job_id=job_id, node_id=node_id, model_id=model_id,
                   weights_digest=weights_digest, prompt_digest=prompt,
                   temperature=temperature, top_p=top_p, seed=seed, max_tokens=max_tokens,
                   output_digest=output, prompt_tokens=prompt_tokens,
                   completion_tokens=completion_tokens, started_at_ms=started,
                   finished_at_ms=finished, activation_commitment=commitment,
                   finish_reason=finish_reason, first_token_at_ms=first_token, version=version)
