"""The seeded sampler every node uses and every verifier re-derives (receipt version 2).

Greedy decoding (temperature 0) takes the most likely token. Otherwise the token is
the Gumbel-max draw over the nucleus:

    argmax over nucleus tokens i of  logits[i] / temperature + gumbel(seed, step, i)

The noise is counter-based (splitmix64 of seed, step and token id), so it is the
same on every machine and needs no random state: a verifier that recomputes the
logits by replay can check each token, and an output from another seed, another
model or another prompt does not pass. The nucleus (top_p) is the smallest set of
most likely tokens whose probabilities sum to at least top_p; ties in probability
are broken by the lower token id.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_STEP_DOMAIN = np.uint64(0x5EED5A3D1E000000)  # keeps (seed, step) apart from (seed', step')
SEED_MAX = (1 << 64) - 1
STEPS_MAX = 1 << 24


def splitmix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 arrays (wrapping arithmetic, no warnings)."""
    z = values + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX_1
    z = (z ^ (z >> np.uint64(27))) * _MIX_2
    return z ^ (z >> np.uint64(31))


def uniform_noise(seed: int, step: int, token_ids: np.ndarray) -> np.ndarray:
    """Uniform draws in (0, 1), one per token id, fixed by (seed, step, token id)."""
    assert 0 <= seed <= SEED_MAX and 0 <= step < STEPS_MAX
    base = splitmix64(np.array([seed], dtype=np.uint64))
    base = splitmix64(base ^ (np.array([step], dtype=np.uint64) + _STEP_DOMAIN))
    bits = splitmix64(base ^ token_ids.astype(np.uint64))
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53 + 2.0**-54


def gumbel_noise(seed: int, step: int, token_ids: np.ndarray) -> np.ndarray:
    return -np.log(-np.log(uniform_noise(seed, step, token_ids)))


def probabilities(logits: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / temperature) in float64."""
    assert temperature > 0
    scaled = logits.astype(np.float64) / temperature
    scaled -= scaled.max()
    weights = np.exp(scaled)
    return weights / weights.sum()


def nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Token ids of the smallest most-likely set holding at least top_p of the mass."""
    if top_p >= 1.0:
        return np.arange(probs.size)
    order = np.lexsort((np.arange(probs.size), -probs))  # most likely first, then lower id
    mass_before = np.concatenate(([0.0], np.cumsum(probs[order])[:-1]))
    return order[mass_before < top_p]


def sample_token(logits: np.ndarray, temperature: float, top_p: float, seed: int, step: int) -> int:
    """The token a node emits at generation step `step` (0 for the first generated token)."""
    assert logits.ndim == 1
    if temperature == 0.0:
        return int(np.argmax(logits))
    candidates = nucleus(probabilities(logits, temperature), top_p)
    scores = logits[candidates].astype(np.float64) / temperature + gumbel_noise(seed, step, candidates)
    return int(candidates[int(np.argmax(scores))])
