"""Small vocabularies shared by the planner's stages."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Strategy(StrEnum):
    SINGLE = "single"
    TENSOR = "tensor"  # every layer split across members; needs RDMA between every pair
    PIPELINE = "pipeline"  # each member holds a run of consecutive layers


class CandidateKind(StrEnum):
    MAC = "mac"
    POD = "pod"


# The members as module constants for the hot paths: on Python 3.11 reading an attribute of an Enum
# class runs EnumType.__getattr__'s hook, about ten times slower than reading a global. Final: compiled
# modules read them from C statics (natives.py says why).
SINGLE: Final = Strategy.SINGLE
TENSOR: Final = Strategy.TENSOR
PIPELINE: Final = Strategy.PIPELINE
MAC: Final = CandidateKind.MAC
POD: Final = CandidateKind.POD
