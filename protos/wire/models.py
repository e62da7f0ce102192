"""ModelSpec <-> mlxnet.v1.ModelSpec, written once for the node that sends it and the coordinator."""

from __future__ import annotations

from contracts.models import ModelSpec
from protos.mlxnet.v1 import common_pb2

KV_BYTES_PER_ELEMENT_UNSET = 2  # an older node leaves the field out: fp16/bf16 KV cache


def model_spec_to_pb(spec: ModelSpec) -> common_pb2.ModelSpec:
    return common_pb2.ModelSpec(
        model_id=spec.model_id, weights_bytes=spec.weights_bytes,
        parameter_count=spec.parameter_count, num_layers=spec.num_layers,
        num_attention_heads=spec.num_attention_heads, num_kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim, max_context_tokens=spec.max_context_tokens,
        kv_bytes_per_element=spec.kv_bytes_per_element, weights_digest=spec.weights_digest,
        chat_features=list(spec.chat_features))


def model_spec_from_pb(message: common_pb2.ModelSpec) -> ModelSpec:
    """ModelSpec asserts every size is positive; a caller that takes foreign input catches it."""
    return ModelSpec(
        model_id=message.model_id, weights_bytes=message.weights_bytes,
        parameter_count=message.parameter_count, num_layers=message.num_layers,
        num_attention_heads=message.num_attention_heads, num_kv_heads=message.num_kv_heads,
        head_dim=message.head_dim, max_context_tokens=message.max_context_tokens,
        kv_bytes_per_element=message.kv_bytes_per_element or KV_BYTES_PER_ELEMENT_UNSET,
        weights_digest=message.weights_digest, chat_features=tuple(message.chat_features))
