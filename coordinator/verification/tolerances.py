"""How far an honest replay may stray from what the node committed.

Calibrated on this machine by `bench/calibrate_tolerances.py`: decoding and a
one-pass replay of the same MLX model (reference BLAS, OpenBLAS, 2-rank tensor
parallel) agree to a few 1e-6 in the final hidden states, which is at most one
quantization unit of a commitment (a unit is 2**exponent / 32760, about 3e-5 of
the chunk's largest value) and no differing top-128 positions. Another model,
precision or prompt moves hundreds of values by hundreds of units. The defaults
leave a margin of about 10x on each side.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerances:
    value_units_max: int = 8  # a committed value matches when within this many quantization units
    mismatches_per_chunk_max: int = 12  # of 128 positions: near-ties at the top-k cut may swap
    logit_slack: float = 2e-3  # greedy: the output token's logit may trail the best by this much
    mass_slack: float = 1e-3  # top_p: probability mass slack at the nucleus boundary
    bad_tokens_reported_max: int = 8  # token mismatches listed in the evidence

    def __post_init__(self) -> None:
        assert self.value_units_max >= 0 and self.mismatches_per_chunk_max >= 0
        assert self.logit_slack >= 0 and self.mass_slack >= 0


DEFAULT_TOLERANCES = Tolerances()
