"""Pods: how a job splits across Macs cabled on one desk, and how fast it then runs.

Tensor parallel splits every layer and exchanges data several times per token, so it
needs RDMA on a cable between every pair of members and heads that divide evenly.
Otherwise a pipeline: each member holds a run of layers in proportion to its memory,
and a token pays one link latency per hop.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from contracts.hardware import LinkKind
from contracts.models import ModelSpec
from coordinator.placement.candidates import PodCandidate
from coordinator.placement.config import SpeedConfig
from coordinator.placement.memory import (
    MemoryEstimate, pipeline_shares_bytes, split_layers_by_memory, tensor_shares_bytes,
)
from coordinator.placement.speed import SpeedProfile, link_latency_s, tensor_speedup
from coordinator.placement.vocabulary import Strategy


@dataclass(frozen=True)
class PodTopology:
    members: int
    rdma_mesh: bool  # every pair of members cabled, every link RDMA
    hop_latency_s: float  # the slowest link's latency


@dataclass(frozen=True)
class PodFit:
    layer_split: tuple[int, ...]
    shares_bytes: tuple[int, ...]  # memory each member reserves


def pod_topology(pod: PodCandidate, config: SpeedConfig) -> PodTopology:
    linked = {frozenset((link.a, link.b)) for link in pod.links}
    every_pair = all(frozenset(pair) in linked for pair in itertools.combinations(pod.members, 2))
    all_rdma = all(link.kind is LinkKind.RDMA_TB5 for link in pod.links)
    latency = max(link_latency_s(link.kind, config) for link in pod.links)
    return PodTopology(len(pod.members), every_pair and all_rdma, latency)


def pod_strategy(topology: PodTopology, model: ModelSpec) -> Strategy:
    n = topology.members
    heads_divide = model.num_attention_heads % n == 0 and model.num_kv_heads % n == 0
    return Strategy.TENSOR if topology.rdma_mesh and heads_divide else Strategy.PIPELINE


def pod_speed_profile(topology: PodTopology, strategy: Strategy, slowest_step: int,
                      config: SpeedConfig) -> SpeedProfile:
    """Speed comes from the slowest member and the links."""
    if strategy is Strategy.TENSOR:
        return SpeedProfile(slowest_step, tensor_speedup(topology.members, config))
    return SpeedProfile(slowest_step, 1.0, topology.members - 1, topology.hop_latency_s)


def can_split(strategy: Strategy, model: ModelSpec, members: int) -> bool:
    return strategy is Strategy.TENSOR or model.num_layers >= members


def fit_pod(estimate: MemoryEstimate, strategy: Strategy, num_layers: int,
            member_free_bytes: tuple[int, ...]) -> PodFit | None:
    """Each member's share, or None when some member cannot hold its share."""
    members = len(member_free_bytes)
    if strategy is Strategy.TENSOR:
        shares = tensor_shares_bytes(estimate, members)
        fits = all(share <= free for share, free in zip(shares, member_free_bytes))
        return PodFit((num_layers,) * members, shares) if fits else None
    if num_layers < members:
        return None
    usable = tuple(max(free - estimate.fixed_overhead_bytes, 1) for free in member_free_bytes)
    layers = list(split_layers_by_memory(num_layers, usable))
    return _repair_pipeline(estimate, num_layers, layers, member_free_bytes)


def _repair_pipeline(estimate: MemoryEstimate, num_layers: int, layers: list[int],
                     free: tuple[int, ...]) -> PodFit | None:
    """Rounding can leave a member one layer over: move layers to members with room."""
    for _ in range(num_layers):
        shares = pipeline_shares_bytes(estimate, num_layers, tuple(layers))
        over = [i for i, share in enumerate(shares) if share > free[i]]
        if not over:
            return PodFit(tuple(layers), shares)
        giver = over[0]
        if layers[giver] == 1:
            return None
        spare = []
        for j, layer_count in enumerate(layers):
            if j != giver:
                taken = pipeline_shares_bytes(estimate, num_layers, (layer_count + 1,))[0]
                if taken <= free[j]:
                    spare.append((free[j] - taken, -j))
        if not spare:
            return None
        _, negative_j = max(spare)
        layers[giver] -= 1
        layers[-negative_j] += 1
    return None
