"""What the network knows about a model: enough to place it without loading it."""

from __future__ import annotations

from dataclasses import dataclass

# No tokenizer in use has this many entries (the largest, Gemma's, has 262,144): token ids
# of a model whose spec gives no vocabulary size are still held below it.
VOCAB_SIZE_MAX = 2**22
CHAT_FEATURE_TOOLS = "tools"  # the template renders tool definitions, calls and results
CHAT_FEATURE_THINKING = "thinking"  # the model reasons in a <think> block before it answers
CHAT_FEATURE_THINKS_BY_DEFAULT = "thinks_by_default"  # the generation prompt opens <think>
CHAT_FEATURE_THINKS_WHEN_ENABLED = "thinks_when_enabled"  # it does with enable_thinking true
CHAT_FEATURE_ENABLE_THINKING = "enable_thinking"  # the template reads enable_thinking
CHAT_FEATURE_REASONING_EFFORT = "reasoning_effort"  # the template reads reasoning_effort
CHAT_FEATURES = (CHAT_FEATURE_TOOLS, CHAT_FEATURE_THINKING, CHAT_FEATURE_THINKS_BY_DEFAULT,
                 CHAT_FEATURE_THINKS_WHEN_ENABLED, CHAT_FEATURE_ENABLE_THINKING,
                 CHAT_FEATURE_REASONING_EFFORT)


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
    vocab_size: int = 0  # embedding rows: every token id is below it; 0 when unknown (older nodes)
    # What the model's chat template can render beyond plain messages (CHAT_FEATURES).
    chat_features: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        assert self.model_id, "model_id must not be empty"
        assert self.weights_bytes > 0 and self.num_layers > 0
        assert self.num_kv_heads > 0 and self.head_dim > 0
        assert self.max_context_tokens > 0
        assert self.vocab_size >= 0
        object.__setattr__(self, "chat_features", tuple(self.chat_features))  # JSON gives a list
