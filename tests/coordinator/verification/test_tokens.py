"""Token checks: honest tokens pass under replay noise; other tokens, seeds and endings do not."""

from __future__ import annotations

import numpy as np
import pytest

from contracts.receipts import FinishReason
from contracts.sampling import sample_token
from coordinator.verification.tokens import NO_TOKEN, Sampling, make_token_check, token_is_plausible
from coordinator.verification.tolerances import DEFAULT_TOLERANCES as TOLERANCES

VOCAB = 512


def _logits(step: int) -> np.ndarray:
    return np.random.default_rng(step).normal(0, 3, VOCAB).astype(np.float32)


def _noisy(logits: np.ndarray, step: int) -> np.ndarray:
    return logits + np.random.default_rng(10_000 + step).normal(0, 2e-5, logits.size).astype(np.float32)


@pytest.mark.parametrize("sampling", [Sampling(0.0, 1.0, 0), Sampling(0.7, 1.0, 5),
                                      Sampling(1.3, 0.9, 77), Sampling(0.2, 0.5, 2**63 - 1)])
def test_the_nodes_own_tokens_pass_under_replay_noise(sampling: Sampling) -> None:
    for step in range(300):
        logits = _logits(step)
        token = sample_token(logits, sampling.temperature, sampling.top_p, sampling.seed, step)
        assert token_is_plausible(_noisy(logits, step), token, step, sampling, TOLERANCES) == (True, token)


@pytest.mark.parametrize("sampling", [Sampling(0.0, 1.0, 0), Sampling(0.8, 0.95, 5)])
def test_other_tokens_fail_almost_always(sampling: Sampling) -> None:
    passed = 0
    for step in range(200):
        logits = _logits(step)
        token = sample_token(logits, sampling.temperature, sampling.top_p, sampling.seed, step)
        other = (token + 1 + step) % VOCAB
        ok, preferred = token_is_plausible(logits, other, step, sampling, TOLERANCES)
        passed += ok
        assert ok or preferred == token  # a failure names what the replay would pick
    assert passed <= 2  # only a near-tie could let another token through


def test_another_seed_is_caught_within_a_few_tokens() -> None:
    honest, cheat = Sampling(0.8, 1.0, 1), Sampling(0.8, 1.0, 2)
    outputs = [sample_token(_logits(s), 0.8, 1.0, cheat.seed, s) for s in range(32)]
    failures = sum(not token_is_plausible(_logits(s), t, s, honest, TOLERANCES)[0]
                   for s, t in enumerate(outputs))
    assert failures >= 16


def test_out_of_range_token_ids_fail() -> None:
    assert not token_is_plausible(_logits(0), VOCAB, 0, Sampling(0.0, 1.0, 0), TOLERANCES)[0]
    assert not token_is_plausible(_logits(0), -1, 0, Sampling(0.5, 1.0, 0), TOLERANCES)[0]


def test_endings_are_checked() -> None:
    logits = _logits(1)
    end = int(np.argmax(logits))  # the model's greedy choice is the end token
    greedy = Sampling(0.0, 1.0, 0)
    check = make_token_check((), FinishReason.END_TOKEN, greedy, frozenset({end}), TOLERANCES)
    assert check(0, logits).ok
    not_end = (end + 1) % VOCAB
    check = make_token_check((), FinishReason.END_TOKEN, greedy, frozenset({not_end}), TOLERANCES)
    assert not check(0, logits).ok
    check = make_token_check((), FinishReason.LENGTH, greedy, frozenset({not_end}), TOLERANCES)
    assert check(0, logits) .ok and check(0, logits).claimed == NO_TOKEN
    check = make_token_check((end,), FinishReason.LENGTH, greedy, frozenset({end}), TOLERANCES)
    assert check(0, logits).problem == "an end token inside the output"
