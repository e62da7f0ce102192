"""The seeded sampler: deterministic, faithful to the distribution, greedy at temperature 0."""

from __future__ import annotations

import numpy as np

from contracts.sampling import nucleus, probabilities, sample_token, uniform_noise


def test_noise_is_fixed_by_seed_step_and_token() -> None:
    tokens = np.arange(1000)
    first = uniform_noise(7, 3, tokens)
    assert np.array_equal(first, uniform_noise(7, 3, tokens))
    assert not np.array_equal(first, uniform_noise(8, 3, tokens))
    assert not np.array_equal(first, uniform_noise(7, 4, tokens))
    assert np.array_equal(first[[5, 900]], uniform_noise(7, 3, np.array([5, 900])))
    assert 0 < first.min() and first.max() < 1


def test_greedy_takes_the_first_best_token() -> None:
    logits = np.array([0.5, 2.0, 2.0, -1.0], dtype=np.float32)
    assert all(sample_token(logits, 0.0, 1.0, seed, 0) == 1 for seed in range(5))


def test_samples_follow_the_distribution() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    counts = np.bincount([sample_token(logits, 1.0, 1.0, 11, step) for step in range(4000)], minlength=4)
    assert np.allclose(counts / 4000, [0.5, 0.3, 0.15, 0.05], atol=0.03)


def test_top_p_keeps_the_smallest_set_with_enough_mass() -> None:
    probs = np.array([0.1, 0.4, 0.3, 0.2])
    assert sorted(nucleus(probs, 0.5).tolist()) == [1, 2]
    assert sorted(nucleus(probs, 0.4).tolist()) == [1]
    assert sorted(nucleus(probs, 1.0).tolist()) == [0, 1, 2, 3]
    logits = np.log(probs)
    assert {sample_token(logits, 1.0, 0.5, 3, step) for step in range(300)} == {1, 2}


def test_temperature_sharpens() -> None:
    logits = np.array([1.0, 0.0])
    assert probabilities(logits, 0.1)[0] > probabilities(logits, 1.0)[0] > probabilities(logits, 5.0)[0]
