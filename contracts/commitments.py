"""Activation commitments: a compact, job-keyed fingerprint of a model's final hidden states.

In the manner of TOPLOC. The hidden states are split into chunks: the whole prompt,
then every CHUNK_TOKENS generated tokens (the states computed with those tokens as
input). For each chunk the node keeps its top_k strongest values (largest
magnitude, ties to the lower flat index) and commits to them as one polynomial
over GF(PRIME):

    P(x_i) = q_i + QUANT_MAX        for each kept value i
    x_i    = keyed_hash(job, chunk, flat index i) mod PRIME
    q_i    = round(value_i / 2**exponent * QUANT_MAX)

`exponent` is the smallest power of two above the chunk's largest magnitude, so
every q_i fits in 16 bits. The positions are not stored: a verifier that replays
the job computes its own strongest positions, evaluates P there and compares the
values. Honest replays land within a unit or two; another model, precision or
prompt gives values that are off by thousands, or garbage where the positions
differ. Because the x_i depend on the job id, a commitment copied from another
job evaluates to garbage.

Byte layout of one chunk (1 + 2 * top_k bytes): i8 exponent, then top_k big-endian u16
coefficients, lowest degree first. A whole commitment:

    u8 version | u16 chunk_tokens | u16 top_k | u16 generated_chunks |
    prompt chunk | generated chunks, in order

Versions differ only in top_k (TOP_K_BY_VERSION). Version 1 kept 128 values per chunk (257
bytes, 8.03 bytes per generated token); nodes now make version 2, 64 values per chunk (129
bytes, 4.03 bytes per token). The seeded token check catches most cheats with no proof bytes,
and a cheat that moves the states moves nearly every strong value, so half the values still
show it (bench/calibrate_tolerances.py). Version-1 receipts still decode and are judged with
version 1's allowance (coordinator.verification.tolerances).
"""

from __future__ import annotations

import functools
import hashlib
import math
import struct
from dataclasses import dataclass

import numpy as np

from contracts.sampling import splitmix64

COMMITMENT_VERSION = 2  # what nodes make; every version in TOP_K_BY_VERSION is still read
TOP_K_BY_VERSION = {1: 128, 2: 64}
VERSION_BY_TOP_K = {top_k: version for version, top_k in TOP_K_BY_VERSION.items()}
CHUNK_TOKENS = 32
TOP_K = TOP_K_BY_VERSION[COMMITMENT_VERSION]
PRIME = 65521  # the largest prime below 2**16: coefficients fit a u16
QUANT_MAX = 32760  # q + QUANT_MAX lies in [0, PRIME - 1]
CANDIDATES = 128 + 64  # strongest values a recorder hands over: version 1's top 128, spares for collisions
CHUNK_BYTES = 1 + 2 * TOP_K
EXPONENT_MIN, EXPONENT_MAX = -64, 64
GENERATED_CHUNKS_MAX = 1 << 12  # 131072 tokens
_HEADER = struct.Struct(">BHHH")


class CommitmentError(ValueError):
    """Hidden states that cannot be committed to (not finite)."""


class CommitmentFormatError(ValueError):
    """The bytes are not a canonical activation commitment of a known version."""


@dataclass(frozen=True)
class TopCandidates:
    """A chunk's strongest hidden-state values: flat index (token offset * hidden + dim) and value."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        assert len(self.indices) == len(self.values)


@dataclass(frozen=True)
class ChunkCommitment:
    exponent: int
    coefficients: tuple[int, ...]  # top_k residues mod PRIME, lowest degree first

    def __post_init__(self) -> None:
        assert EXPONENT_MIN <= self.exponent <= EXPONENT_MAX
        assert len(self.coefficients) in VERSION_BY_TOP_K
        assert all(0 <= c < PRIME for c in self.coefficients)

    @property
    def top_k(self) -> int:
        return len(self.coefficients)


@dataclass(frozen=True)
class ActivationCommitment:
    prompt: ChunkCommitment
    generated: tuple[ChunkCommitment, ...]

    def __post_init__(self) -> None:
        assert all(c.top_k == self.prompt.top_k for c in self.generated), "one version per commitment"

    @property
    def chunks(self) -> tuple[ChunkCommitment, ...]:
        return (self.prompt, *self.generated)

    @property
    def version(self) -> int:
        return VERSION_BY_TOP_K[self.prompt.top_k]


def generated_chunk_count(completion_tokens: int) -> int:
    return math.ceil(completion_tokens / CHUNK_TOKENS)


# --- keyed positions -----------------------------------------------------------

def chunk_key(job_id: str, chunk_number: int) -> int:
    """A 64-bit key per (job, chunk); chunk 0 is the prompt, 1.. the generated chunks."""
    digest = hashlib.sha256(f"mlxnet.activations.v1\x00{job_id}\x00{chunk_number}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _positions(key: int, indices: np.ndarray) -> np.ndarray:
    mixed = splitmix64(indices.astype(np.uint64) ^ np.array([key], dtype=np.uint64))
    return (mixed % np.uint64(PRIME)).astype(np.int64)


def strongest(candidates: TopCandidates, key: int,
              top_k: int = TOP_K) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top_k strongest values with distinct keyed positions: (indices, values, positions).

    Order: largest magnitude first, ties to the lower index; a value whose keyed
    position repeats a stronger one's is skipped, so the same candidates always
    give the same set.
    """
    indices = np.asarray(candidates.indices, dtype=np.int64)
    values = np.asarray(candidates.values, dtype=np.float64)
    if not np.isfinite(values).all():
        raise CommitmentError("hidden states are not finite; the model produced NaN or infinity")
    order = np.lexsort((indices, -np.abs(values)))
    indices, values = indices[order], values[order]
    positions = _positions(key, indices)
    _, first = np.unique(positions, return_index=True)
    keep = np.sort(first)[:top_k]
    return indices[keep], values[keep], positions[keep]


# --- arithmetic in GF(PRIME) ----------------------------------------------------

@functools.lru_cache(maxsize=1)
def _inverses() -> np.ndarray:
    """inverse[a] * a == 1 mod PRIME for a in 1..PRIME-1 (Fermat: a**(PRIME-2))."""
    base = np.arange(PRIME, dtype=np.int64)
    result = np.ones(PRIME, dtype=np.int64)
    exponent = PRIME - 2
    while exponent:
        if exponent & 1:
            result = result * base % PRIME
        base = base * base % PRIME
        exponent >>= 1
    return result


def interpolate(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Coefficients (lowest degree first) of the polynomial through (xs, ys) mod PRIME."""
    count = xs.size
    assert count == ys.size and np.unique(xs).size == count
    inverse = _inverses()
    newton = ys.astype(np.int64) % PRIME
    for level in range(1, count):  # divided differences, one vector step per level
        step = inverse[(xs[level:] - xs[:-level]) % PRIME]
        newton[level:] = (newton[level:] - newton[level - 1:-1]) % PRIME * step % PRIME
    poly = np.zeros(count, dtype=np.int64)
    if count:
        poly[0] = newton[-1]
    for level in range(count - 2, -1, -1):  # poly = poly * (x - xs[level]) + newton[level]
        poly = (np.concatenate(([0], poly[:-1])) - xs[level] * poly) % PRIME
        poly[0] = (poly[0] + newton[level]) % PRIME
    return poly


def evaluate(coefficients: np.ndarray, xs: np.ndarray) -> np.ndarray:
    result = np.zeros(xs.size, dtype=np.int64)
    for coefficient in coefficients[::-1]:
        result = (result * xs + int(coefficient)) % PRIME
    return result


# --- commit and compare ---------------------------------------------------------

def _exponent(values: np.ndarray) -> int:
    largest = float(np.abs(values).max()) if values.size else 0.0
    if largest == 0.0:
        return 0
    _, exponent = math.frexp(largest)  # largest < 2**exponent
    return min(max(exponent, EXPONENT_MIN), EXPONENT_MAX)


def quantize(values: np.ndarray, exponent: int) -> np.ndarray:
    """Values as integers on the chunk's scale; the committed ones lie within +-QUANT_MAX."""
    return np.rint(values / 2.0**exponent * QUANT_MAX).astype(np.int64)


def commit_chunk(candidates: TopCandidates, key: int, top_k: int = TOP_K) -> ChunkCommitment:
    """top_k: TOP_K (the current version) unless a test or tool makes an older version's chunk."""
    assert top_k in VERSION_BY_TOP_K
    _, values, positions = strongest(candidates, key, top_k)
    exponent = _exponent(values)
    levels = np.clip(quantize(values, exponent), -QUANT_MAX, QUANT_MAX) + QUANT_MAX
    poly = interpolate(positions, levels)
    coefficients = np.zeros(top_k, dtype=np.int64)
    coefficients[:poly.size] = poly
    return ChunkCommitment(exponent, tuple(int(c) for c in coefficients))


def value_differences(commitment: ChunkCommitment, candidates: TopCandidates, key: int) -> np.ndarray:
    """|committed - recomputed| in quantization units at the verifier's own strongest positions.

    Small everywhere for an honest chunk. Where the committed polynomial was not
    fitted (the positions differ) it returns noise, typically thousands of units.
    The commitment's own top_k (its version's) is how many of the verifier's values are compared.
    """
    _, values, positions = strongest(candidates, key, commitment.top_k)
    committed = evaluate(np.asarray(commitment.coefficients, dtype=np.int64), positions) - QUANT_MAX
    return np.abs(committed - quantize(values, commitment.exponent))


# --- bytes ----------------------------------------------------------------------

def chunk_bytes(version: int) -> int:
    return 1 + 2 * TOP_K_BY_VERSION[version]


def _encode_chunk(chunk: ChunkCommitment) -> bytes:
    return struct.pack(">b", chunk.exponent) + struct.pack(f">{chunk.top_k}H", *chunk.coefficients)


def encode_commitment(commitment: ActivationCommitment) -> bytes:
    """In the version its chunks' top_k is (COMMITMENT_VERSION for chunks commit_chunk made)."""
    assert len(commitment.generated) <= GENERATED_CHUNKS_MAX
    header = _HEADER.pack(commitment.version, CHUNK_TOKENS, commitment.prompt.top_k, len(commitment.generated))
    return header + b"".join(_encode_chunk(c) for c in commitment.chunks)


def decode_commitment(data: bytes) -> ActivationCommitment:
    if len(data) < _HEADER.size:
        raise CommitmentFormatError("activation commitment is truncated")
    version, chunk_tokens, top_k, generated = _HEADER.unpack_from(data)
    if version not in TOP_K_BY_VERSION:
        raise CommitmentFormatError(f"unsupported activation commitment version {version}")
    expected_top_k = TOP_K_BY_VERSION[version]
    if (chunk_tokens, top_k) != (CHUNK_TOKENS, expected_top_k):
        raise CommitmentFormatError(f"commitment uses chunks of {chunk_tokens} tokens and top "
                                    f"{top_k}; version {version} uses {CHUNK_TOKENS} and {expected_top_k}")
    size = chunk_bytes(version)
    if len(data) != _HEADER.size + size * (1 + generated):
        raise CommitmentFormatError("activation commitment length does not match its chunk count")
    chunks = []
    for start in range(_HEADER.size, len(data), size):
        (exponent,) = struct.unpack_from(">b", data, start)
        coefficients = struct.unpack_from(f">{top_k}H", data, start + 1)
        if not EXPONENT_MIN <= exponent <= EXPONENT_MAX or max(coefficients) >= PRIME:
            raise CommitmentFormatError("activation commitment chunk is out of range")
        chunks.append(ChunkCommitment(exponent, coefficients))
    return ActivationCommitment(chunks[0], tuple(chunks[1:]))
