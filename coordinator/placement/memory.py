"""Memory: what a job needs, what a Mac can give, and how a pod member's share is sized.

exo counts weights only and its users report OOMs; we count the KV cache for the
whole context and a runtime overhead too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from contracts.models import ModelSpec
from coordinator.placement.candidates import LendingMode, MacCandidate
from coordinator.placement.config import MemoryConfig


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: int
    kv_cache_bytes: int
    overhead_bytes: int  # fixed runtime allowance, prefill activations, a fraction of the weights
    total_bytes: int
    fixed_overhead_bytes: int = 0  # the part of overhead every pod member pays in full

    def __post_init__(self) -> None:
        assert min(self.weights_bytes, self.kv_cache_bytes, self.fixed_overhead_bytes) >= 0
        assert self.overhead_bytes >= self.fixed_overhead_bytes
        assert self.total_bytes == self.weights_bytes + self.kv_cache_bytes + self.overhead_bytes

    @property
    def batch_shared_bytes(self) -> int:
        """The weights and the fixed runtime: held once on a Mac however many jobs of the model it runs
        (they decode in one batch); each job adds the rest, its KV cache and working memory."""
        return self.weights_bytes + self.fixed_overhead_bytes

    @property
    def shareable_bytes(self) -> int:
        """Weights, KV cache and the overhead that grows with them: split across pod members."""
        return self.total_bytes - self.fixed_overhead_bytes

    def pod_total_bytes(self, members: int) -> int:
        """The least a pod of this many members needs in all (each pays the fixed overhead)."""
        return self.shareable_bytes + members * self.fixed_overhead_bytes


def kv_cache_bytes_per_token(model: ModelSpec) -> int:
    """Keys and values for every layer: 2 x layers x kv_heads x head_dim x bytes per element."""
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * model.kv_bytes_per_element


SCORE_BYTES_PER_ELEMENT: Final = 4  # softmax runs in fp32 even for fp16 models (measured)


def prefill_activation_bytes(model: ModelSpec, context_tokens: int, config: MemoryConfig) -> int:
    """Peak activations of one prefill chunk: attention scores over the context, hidden states."""
    chunk = min(context_tokens, config.prefill_chunk_tokens)
    hidden = model.num_attention_heads * model.head_dim
    scores = (model.num_attention_heads * context_tokens * SCORE_BYTES_PER_ELEMENT
              if config.attention_scores_materialized else 0)
    hidden_states = config.activation_hidden_multiple * hidden * model.kv_bytes_per_element
    return chunk * (scores + hidden_states)


def estimate_job_memory(model: ModelSpec, context_tokens: int,
                        config: MemoryConfig = MemoryConfig()) -> MemoryEstimate:
    assert context_tokens > 0
    kv = kv_cache_bytes_per_token(model) * context_tokens
    overhead = (config.overhead_fixed_bytes + prefill_activation_bytes(model, context_tokens, config)
                + math.ceil(model.weights_bytes * config.overhead_fraction_of_weights))
    return MemoryEstimate(weights_bytes=model.weights_bytes, kv_cache_bytes=kv, overhead_bytes=overhead,
                          total_bytes=model.weights_bytes + kv + overhead,
                          fixed_overhead_bytes=config.overhead_fixed_bytes)


def owner_reserve_bytes(memory_bytes: int, config: MemoryConfig) -> int:
    return max(config.owner_reserve_min_bytes, int(memory_bytes * config.owner_reserve_fraction))


def mac_ceiling_bytes(mac: MacCandidate, config: MemoryConfig) -> int:
    """The most the network may ever commit on this Mac: GPU budget, operator cap, owner reserve."""
    ceiling = mac.hardware.gpu_working_set_bytes
    if mac.memory_cap_bytes is not None:
        ceiling = min(ceiling, mac.memory_cap_bytes)
    if mac.mode is LendingMode.IDLE:
        ceiling = min(ceiling, mac.hardware.memory_bytes - owner_reserve_bytes(mac.hardware.memory_bytes, config))
    return max(ceiling, 0)


def held_for_model(mac: MacCandidate, model_id: str) -> int:
    """Memory already committed on this Mac for the model's running jobs that a new job of it shares."""
    for held_model, held, _ in mac.shared_memory:
        if held_model == model_id:
            return held
    return 0


def mac_free_bytes(mac: MacCandidate, config: MemoryConfig) -> int:
    """Free capacity now; negative when commitments exceed a ceiling that has since shrunk."""
    return mac_ceiling_bytes(mac, config) - mac.committed_memory_bytes


def split_layers_by_memory(num_layers: int, member_memory_bytes: tuple[int, ...]) -> tuple[int, ...]:
    """Layers per member in proportion to memory, every member at least one, summing to num_layers.

    Largest-remainder rounding in exact integer arithmetic, ties to the earlier member,
    so the split is deterministic.
    """
    members = len(member_memory_bytes)
    assert members >= 1 and num_layers >= members, "each member needs at least one layer"
    weights = [m if m > 1 else 1 for m in member_memory_bytes]
    total = sum(weights)
    layers = [max(1, num_layers * w // total) for w in weights]
    # Compare (num_layers * w / total - layers) scaled by total to stay in integers. Plain loops, not
    # max() over lists of tuples: compiled, this is machine arithmetic (pod searches call it per pod).
    assigned = sum(layers)
    while assigned > num_layers:  # take a layer from the member furthest over its share (the last of equals)
        taker, furthest = -1, 0
        for i in range(members):
            over = layers[i] * total - num_layers * weights[i]
            if layers[i] > 1 and (taker < 0 or over >= furthest):
                taker, furthest = i, over
        layers[taker] -= 1
        assigned -= 1
    while assigned < num_layers:  # give a layer to the member furthest under its share (the first of equals)
        giver, furthest = 0, num_layers * weights[0] - layers[0] * total
        for i in range(1, members):
            under = num_layers * weights[i] - layers[i] * total
            if under > furthest:
                giver, furthest = i, under
        layers[giver] += 1
        assigned += 1
    assert assigned == num_layers and min(layers) >= 1
    return tuple(layers)


def pipeline_shares_bytes(estimate: MemoryEstimate, num_layers: int, layer_split: tuple[int, ...]) -> tuple[int, ...]:
    """Each member holds its layers' weights, KV cache and scaled overhead, plus the fixed overhead."""
    shareable = estimate.shareable_bytes
    return tuple(-(-shareable * layers // num_layers) + estimate.fixed_overhead_bytes for layers in layer_split)


def tensor_shares_bytes(estimate: MemoryEstimate, members: int) -> tuple[int, ...]:
    """Every layer is split evenly, so each member holds 1/n of everything plus the fixed overhead."""
    share = -(-estimate.shareable_bytes // members) + estimate.fixed_overhead_bytes
    return (share,) * members
