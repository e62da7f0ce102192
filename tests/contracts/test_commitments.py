"""Activation commitments: exact arithmetic, compact bytes, tolerant to noise, keyed to the job."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.commitments import (
    CANDIDATES, CHUNK_BYTES, COMMITMENT_VERSION, PRIME, QUANT_MAX, TOP_K, TOP_K_BY_VERSION,
    ActivationCommitment, CommitmentError, chunk_bytes,
    CommitmentFormatError, TopCandidates, chunk_key, commit_chunk, decode_commitment,
    encode_commitment, evaluate, interpolate, strongest, value_differences,
)


def _candidates(values: np.ndarray) -> TopCandidates:
    order = np.argsort(-np.abs(values), kind="stable")[:CANDIDATES]
    return TopCandidates(tuple(int(i) for i in order), tuple(float(values[i]) for i in order))


def _hidden(seed: int, size: int = 32 * 256) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2, size).astype(np.float32)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, PRIME - 1), min_size=1, max_size=TOP_K, unique=True), st.data())
def test_interpolation_passes_through_every_point(xs: list[int], data: st.DataObject) -> None:
    ys = data.draw(st.lists(st.integers(0, PRIME - 1), min_size=len(xs), max_size=len(xs)))
    coefficients = interpolate(np.array(xs), np.array(ys))
    assert evaluate(coefficients, np.array(xs)).tolist() == ys


def test_a_version_2_chunk_is_129_bytes_for_top_64() -> None:
    chunk = commit_chunk(_candidates(_hidden(0)), chunk_key("job-a", 0))
    encoded = encode_commitment(ActivationCommitment(chunk, (chunk, chunk)))
    assert COMMITMENT_VERSION == 2 and TOP_K == 64 and CHUNK_BYTES == 129 and len(encoded) == 7 + 3 * 129
    assert encoded[0] == 2
    assert decode_commitment(encoded) == ActivationCommitment(chunk, (chunk, chunk))


def test_a_version_1_commitment_still_decodes_as_top_128() -> None:
    chunk = commit_chunk(_candidates(_hidden(0)), chunk_key("job-a", 0), top_k=128)
    encoded = encode_commitment(ActivationCommitment(chunk, (chunk,)))
    assert encoded[0] == 1 and len(encoded) == 7 + 2 * chunk_bytes(1) == 7 + 2 * 257
    decoded = decode_commitment(encoded)
    assert decoded.version == 1 and decoded == ActivationCommitment(chunk, (chunk,))


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(TOP_K_BY_VERSION)), st.integers(0, 2**31), st.floats(0.0, 0.4))
def test_every_version_matches_its_own_states_within_a_unit(version: int, seed: int, noise: float) -> None:
    """Honest noise below half a unit: at most a unit off, at each version's top_k positions."""
    hidden = _hidden(seed)
    key = chunk_key("job-h", seed % 7)
    chunk = commit_chunk(_candidates(hidden), key, TOP_K_BY_VERSION[version])
    unit = 2.0 ** chunk.exponent / QUANT_MAX
    jitter = np.random.default_rng(seed + 1).uniform(-noise, noise, hidden.size) * unit
    differences = value_differences(chunk, _candidates((hidden + jitter).astype(np.float64)), key)
    assert differences.size == TOP_K_BY_VERSION[version] and differences.max() <= 1
    assert decode_commitment(encode_commitment(ActivationCommitment(chunk, ()))).version == version


def test_the_same_states_match_exactly_and_noise_stays_within_a_unit() -> None:
    hidden = _hidden(1)
    key = chunk_key("job-a", 3)
    chunk = commit_chunk(_candidates(hidden), key)
    assert value_differences(chunk, _candidates(hidden), key).max() == 0
    noisy = hidden + np.random.default_rng(2).normal(0, 3e-6, hidden.size).astype(np.float32)
    assert value_differences(chunk, _candidates(noisy), key).max() <= 1


def test_other_states_or_another_jobs_key_give_large_differences() -> None:
    hidden = _hidden(3)
    key = chunk_key("job-a", 1)
    chunk = commit_chunk(_candidates(hidden), key)
    other = value_differences(chunk, _candidates(_hidden(4)), key)
    assert (other > 8).sum() > 50  # of TOP_K = 64
    copied = value_differences(chunk, _candidates(hidden), chunk_key("job-b", 1))
    assert (copied > 8).sum() > 50
    slightly = value_differences(chunk, _candidates(hidden * 1.002), key)  # a 0.2% drift
    assert (slightly > 8).sum() > 30


def test_strongest_breaks_ties_by_index_and_skips_position_collisions() -> None:
    values = np.zeros(4096, dtype=np.float32)
    values[:300] = 1.0  # 300 equal magnitudes: the lowest indices win
    indices, _, positions = strongest(_candidates(values), chunk_key("job-a", 0))
    assert len(set(positions.tolist())) == len(positions) == TOP_K
    assert indices.tolist() == sorted(indices.tolist())


def test_non_finite_states_cannot_be_committed() -> None:
    values = _hidden(5)
    values[7] = np.inf
    with pytest.raises(CommitmentError, match="not finite"):
        commit_chunk(_candidates(values), chunk_key("job-a", 0))


def test_values_are_scaled_to_the_chunk_so_they_fit_sixteen_bits() -> None:
    hidden = _hidden(6) * 1000
    chunk = commit_chunk(_candidates(hidden), chunk_key("job-a", 0))
    assert 2.0 ** (chunk.exponent - 1) <= np.abs(hidden).max() < 2.0 ** chunk.exponent
    assert QUANT_MAX < PRIME // 2 + 1


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b[:-1], "length"),
    (lambda b: b"\x03" + b[1:], "version 3"),
    (lambda b: b"\x01" + b[1:], "version 1 uses 32 and 128"),
    (lambda b: b[:1] + b"\x00\x10" + b[3:], "chunks of 16"),
    (lambda b: b[:3], "truncated"),
])
def test_malformed_bytes_are_refused(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    chunk = commit_chunk(_candidates(_hidden(7)), chunk_key("job-a", 0))
    with pytest.raises(CommitmentFormatError, match=message):
        decode_commitment(mutate(encode_commitment(ActivationCommitment(chunk, ()))))


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_decode_or_raise_format_error(data: bytes) -> None:
    try:
        decode_commitment(data)
    except CommitmentFormatError:
        pass
