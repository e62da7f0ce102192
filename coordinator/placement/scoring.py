"""Named scores, each in 0..1, and how they combine.

Every score is normalised against fixed references, never against the other
candidates, so a candidate's score does not depend on who else is in the fleet.
That is what lets the index prune and the exhaustive search agree on the best.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Final

from coordinator.placement.config import PlacementConfig

# Warmth, reputation and price are folded into one static score, quantised so equal Macs tie exactly.
STATIC_SCORE_BITS: Final = 25
STATIC_SCORE_SCALE: Final = 1 << (STATIC_SCORE_BITS - 1)  # static score = q / scale, q in 0..scale


class ScoreName(StrEnum):
    BEST_FIT = "best_fit"
    SPEED = "speed"
    WARM_MODEL = "warm_model"
    REPUTATION = "reputation"
    PRICE = "price"


def best_fit_score(free_bytes: int, need_bytes: int, span_octaves: float) -> float:
    """1 for an exact fit, falling by 1/span per doubling of spare memory, floored at 0."""
    assert 0 < need_bytes <= free_bytes
    return max(0.0, 1.0 - math.log2(free_bytes / need_bytes) / span_octaves)


def speed_score(decode_tokens_per_s: float, target_tokens_per_s: float) -> float:
    return min(1.0, decode_tokens_per_s / target_tokens_per_s)


def speed_target(min_decode_tokens_per_s: float, config: PlacementConfig) -> float:
    """Speed beyond what the job needs (or a comfortable reading pace) earns nothing."""
    comfortable = config.comfortable_decode_tokens_per_s
    # max() as a conditional: every decision asks this, and a call to max() costs more than the comparison.
    return min_decode_tokens_per_s if min_decode_tokens_per_s > comfortable else comfortable


def price_score(price_per_million_tokens: int, config: PlacementConfig) -> float:
    return price_score_against(price_per_million_tokens, config.price_reference_per_million_tokens)


def price_score_against(price_per_million_tokens: int, reference_per_million_tokens: int) -> float:
    """1 when free, 0.5 at the reference price, falling towards 0."""
    return 1.0 / (1.0 + price_per_million_tokens / reference_per_million_tokens)


def static_score_quantum(reputation: float, price_per_million_tokens: int, warm: bool,
                         config: PlacementConfig) -> int:
    """Weighted warm-model, reputation and price scores: the part that is fixed for a (candidate,
    model) pair, so the index can sort on it. An integer in 0..STATIC_SCORE_SCALE."""
    _, _, w_warm, w_reputation, w_price = config.weights.normalised
    value = w_warm * (1.0 if warm else 0.0) + w_reputation * reputation \
        + w_price * price_score(price_per_million_tokens, config)
    return min(STATIC_SCORE_SCALE, max(0, round(value * STATIC_SCORE_SCALE)))


def static_score(quantum: int) -> float:
    return quantum / STATIC_SCORE_SCALE


def speed_part(w_speed: float, speed: float) -> float:
    return w_speed * speed


def total_score(w_fit: float, fit: float, speed_weighted: float, static: float) -> float:
    """The index inlines this exact expression; keep the two identical so ties stay exact."""
    return w_fit * fit + speed_weighted + static


def named_scores(fit: float, speed: float, warm: float, reputation: float,
                 price: float) -> tuple[tuple[ScoreName, float], ...]:
    return ((ScoreName.BEST_FIT, fit), (ScoreName.SPEED, speed), (ScoreName.WARM_MODEL, warm),
            (ScoreName.REPUTATION, reputation), (ScoreName.PRICE, price))
