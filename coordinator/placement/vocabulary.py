"""Small vocabularies shared by the planner's stages."""

from __future__ import annotations

from enum import StrEnum


class Strategy(StrEnum):
    SINGLE = "single"
    TENSOR = "tensor"  # every layer split across members; needs RDMA between every pair
    PIPELINE = "pipeline"  # each member holds a run of consecutive layers


class CandidateKind(StrEnum):
    MAC = "mac"
    POD = "pod"


# The members as module constants for the hot paths: on Python 3.11 reading an attribute of an Enum
# class runs EnumType.__getattr__'s hook, about ten times slower than reading a global.
SINGLE, TENSOR, PIPELINE = Strategy.SINGLE, Strategy.TENSOR, Strategy.PIPELINE
MAC, POD = CandidateKind.MAC, CandidateKind.POD
