"""A check job a peer runs on another node's job, and the signed result it returns.

The checker replays the job's prompt plus its claimed output in one prefill pass with its own
copy of the weights (node_agent.inference.engine.Engine.replay) and reports what it saw: its
strongest final hidden-state values per chunk (the opening the coordinator evaluates the
checked node's commitment at, with contracts.commitments.value_differences) and, for every
generated step, whether the seeded sampler could have picked the claimed token
(contracts.token_checks). The coordinator judges the checked node's receipt against it with
the very functions its own verifier uses, and loads no model.

Canonical bytes of a result, signed by the checker's node key over
`SIGNING_DOMAIN || body` (big-endian; `str` and `bytes` are a u32 length then the bytes):

    b"MLXK" | u8 version=1 | str check_id | str job_id | str checker_node_id |
    str model_id | str weights_digest | bytes32 prompt_digest | bytes32 output_digest |
    u32 prompt_tokens | u16 chunks (prompt first) |
    per chunk: u16 count | count x (u64 flat index, f64 value) |
    u32 steps | per step: u8 ok | u8 problem | i64 claimed | i64 preferred
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from contracts.commitments import CANDIDATES, GENERATED_CHUNKS_MAX, TopCandidates
from contracts.receipts import FinishReason
from contracts.token_checks import NO_TOKEN, TokenCheck, TokenSlack

MAGIC = b"MLXK"
VERSION = 1
SIGNING_DOMAIN = b"mlxnet.check.v1\x00"
STEPS_MAX = 1 << 17  # the most generated steps one check covers (max_tokens is far lower)
_TEXT_BYTES_MAX = 1024
_PROBLEMS = ("", "not what the model samples", "an end token inside the output",
             "claims the model ended here, but it would go on")


class CheckResultFormatError(ValueError):
    """The bytes are not a canonical check result."""


@dataclass(frozen=True)
class CheckJob:
    """What a checker is sent: the job as the coordinator recorded it (never the checked node's proof)."""

    check_id: str
    job_id: str  # the checked job: its commitment's positions are keyed by it
    model_id: str
    weights_digest: str
    prompt: str
    output_ids: tuple[int, ...]
    finish_reason: FinishReason
    temperature: float
    top_p: float
    seed: int
    slack: TokenSlack


@dataclass(frozen=True)
class CheckResult:
    check_id: str
    job_id: str
    checker_node_id: str
    model_id: str
    weights_digest: str
    prompt_digest: bytes
    output_digest: bytes
    prompt_tokens: int
    prompt: TopCandidates
    generated: tuple[TopCandidates, ...]
    token_checks: tuple[TokenCheck, ...]

    def __post_init__(self) -> None:
        assert len(self.prompt_digest) == 32 and len(self.output_digest) == 32
        assert len(self.generated) <= GENERATED_CHUNKS_MAX and len(self.token_checks) <= STEPS_MAX


def signing_bytes(body: bytes) -> bytes:
    return SIGNING_DOMAIN + body


def result_digest(body: bytes) -> str:
    """The receipt of a check: what the ledger transfer and the check record name."""
    return hashlib.sha256(signing_bytes(body)).hexdigest()


def _text(value: str) -> bytes:
    raw = value.encode()
    assert len(raw) <= _TEXT_BYTES_MAX
    return struct.pack(">I", len(raw)) + raw


def _chunk(candidates: TopCandidates) -> bytes:
    assert len(candidates.indices) <= CANDIDATES
    parts = [struct.pack(">H", len(candidates.indices))]
    parts += [struct.pack(">Qd", index, value) for index, value in zip(candidates.indices, candidates.values)]
    return b"".join(parts)


def _step(check: TokenCheck) -> bytes:
    problem = _PROBLEMS.index(check.problem) if check.problem in _PROBLEMS else 1
    return struct.pack(">BBqq", int(check.ok), problem, check.claimed, check.preferred)


def encode_result(result: CheckResult) -> bytes:
    chunks = (result.prompt, *result.generated)
    return b"".join([
        MAGIC, struct.pack(">B", VERSION), _text(result.check_id), _text(result.job_id),
        _text(result.checker_node_id), _text(result.model_id), _text(result.weights_digest),
        result.prompt_digest, result.output_digest, struct.pack(">IH", result.prompt_tokens, len(chunks)),
        *(_chunk(c) for c in chunks),
        struct.pack(">I", len(result.token_checks)), *(_step(c) for c in result.token_checks),
    ])


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.offset = data, 0

    def unpack(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.offset + size > len(self.data):
            raise CheckResultFormatError("check result is truncated")
        values = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += size
        return values

    def take(self, size: int) -> bytes:
        if self.offset + size > len(self.data):
            raise CheckResultFormatError("check result is truncated")
        self.offset += size
        return self.data[self.offset - size:self.offset]

    def text(self, field: str) -> str:
        (size,) = self.unpack(">I")
        if size > _TEXT_BYTES_MAX:
            raise CheckResultFormatError(f"check result {field} is longer than {_TEXT_BYTES_MAX} bytes")
        try:
            return self.take(size).decode()
        except UnicodeDecodeError as error:
            raise CheckResultFormatError(f"check result {field} is not UTF-8") from error


def _read_chunk(reader: _Reader) -> TopCandidates:
    (count,) = reader.unpack(">H")
    if count > CANDIDATES:
        raise CheckResultFormatError(f"a check result chunk holds {count} values; at most {CANDIDATES}")
    pairs = [reader.unpack(">Qd") for _ in range(count)]
    return TopCandidates(tuple(int(i) for i, _ in pairs), tuple(float(v) for _, v in pairs))


def _read_step(reader: _Reader, step: int) -> TokenCheck:
    ok, problem, claimed, preferred = reader.unpack(">BBqq")
    if ok > 1 or problem >= len(_PROBLEMS) or claimed < NO_TOKEN or preferred < NO_TOKEN:
        raise CheckResultFormatError(f"check result step {step} is out of range")
    return TokenCheck(step, claimed, bool(ok), preferred, _PROBLEMS[problem])


def decode_result(data: bytes) -> CheckResult:
    reader = _Reader(data)
    if reader.take(4) != MAGIC:
        raise CheckResultFormatError("not a check result (bad magic)")
    (version,) = reader.unpack(">B")
    if version != VERSION:
        raise CheckResultFormatError(f"unsupported check result version {version}")
    names = ("check_id", "job_id", "checker_node_id", "model_id", "weights_digest")
    texts = [reader.text(name) for name in names]
    prompt_digest, output_digest = reader.take(32), reader.take(32)
    prompt_tokens, chunk_count = reader.unpack(">IH")
    if not 1 <= chunk_count <= GENERATED_CHUNKS_MAX + 1:
        raise CheckResultFormatError(f"check result has {chunk_count} chunks")
    chunks = [_read_chunk(reader) for _ in range(chunk_count)]
    (steps,) = reader.unpack(">I")
    if steps > STEPS_MAX:
        raise CheckResultFormatError(f"check result covers {steps} steps; at most {STEPS_MAX}")
    checks = tuple(_read_step(reader, step) for step in range(steps))
    if reader.offset != len(data):
        raise CheckResultFormatError("check result has trailing bytes")
    return CheckResult(*texts, prompt_digest, output_digest, prompt_tokens, chunks[0],  # type: ignore[arg-type]
                       tuple(chunks[1:]), checks)
