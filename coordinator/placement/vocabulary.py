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

