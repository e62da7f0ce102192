"""What the network knows about a model: enough to place it without loading it."""

from __future__ import annotations

from dataclasses import dataclass

CHAT_FEATURE_TOOLS = "tools"  # the template renders tool definitions, calls and results
CHAT_FEATURES = (CHAT_FEATURE_TOOLS,)


@dataclass(frozen=True)
class ModelSpec:
    model_id: str  # a hub id ("mlx-community/...") or the path a node serves it from
    weights_bytes: int  # sum of the safetensors files
    parameter_count: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    max_context_tokens: int
    kv_bytes_per_element: int = 2  # fp16/bf16 KV cache
    weights_digest: str = ""  # sha256 over the weight files, hex
    # What the model's chat template can render beyond plain messages (CHAT_FEATURES).
    chat_features: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        assert self.model_id, "model_id must not be empty"
        assert self.weights_bytes > 0 and self.num_layers > 0
        assert self.num_kv_heads > 0 and self.head_dim > 0
        assert self.max_context_tokens > 0
        object.__setattr__(self, "chat_features", tuple(self.chat_features))  # JSON gives a list
