"""Scored: one candidate as a search scored it, read by the assembly and the explanation.

Apart from search.py so that the explanation can name it without importing the search.
"""

from __future__ import annotations

from typing import NamedTuple

from coordinator.placement.vocabulary import Strategy


class Scored(NamedTuple):
    """One scored candidate; a named tuple, as the scan's plain tuples become these (cheaply) at the end."""

    total: float
    position: int  # in the index's Mac or pod slots
    free_bytes: int  # a Mac's free memory, or a pod's summed free memory
    fit: float
    speed: float
    warm: bool
    decode_tokens_per_s: float
    strategy: Strategy = Strategy.SINGLE
