"""The project's own tiny language model, built from corpus statistics in seconds.

No weights can be downloaded here, and gradient training of a transformer on the
CPU build of MLX is far too slow for test setup, so the model is constructed
rather than trained end to end:

1. A byte-level BPE tokenizer (1024 tokens) is trained with `tokenizers` on the
   shipped corpus, Genesis 1-22 from the King James Version (public domain; see
   `corpus/README.md`).
2. From the tokenized corpus we count bigrams (next token given the current one)
   and skip-bigrams (next token given the one before the current one), smooth both
   by backing off to the unigram distribution, and combine them naive-Bayes style:
   `logit(n) = log P(n | cur) + SKIP_WEIGHT * (log P(n | prev) - log P(n))`.
3. Each table is factorised at low rank: truncated SVD of the centred
   log-probabilities, then `FIT_STEPS` Adam steps (plain numpy, about a second)
   on the cross-entropy against the smoothed table. The left factors become
   embedding features, the right factors become rows of `lm_head`.
4. Layer 0 has two hand-set attention heads. Head 0 uses RoPE phases so that every
   query attends to the position just before it, copying that token's skip-bigram
   features into the residual stream. Head 1 attends to a Gaussian window of about
   the last `WINDOW_TOKENS` tokens and writes the mean of their random identity
   codes; `lm_head` subtracts `REPEAT_PENALTY * code(n) . mean`, a built-in
   repetition penalty that keeps greedy decoding from cycling on one phrase.
5. Every other head, every MLP and all of layers 1-3 get small random weights drawn
   from `seed`: they compute real attention and activations but barely move the
   residual stream. Filler features hold the residual norm constant, so each
   RMSNorm acts as a fixed scale and the designed logits survive it.

The result is a 3.1M-parameter llama (or qwen2) model whose greedy output is
KJV-flavoured word salad, corpus words in plausible local order with no meaning:
"The" -> "fountain of the LORD, and the earth. And he said unto him, and begat sons
and daughters." It never learned to emit EOS, so generation runs to `max_tokens`.

Determinism: the same seed and architecture give byte-identical files. SVD signs
are fixed and weights are rounded to float16 precision (stored as float32, which
is faster on the CPU), so the last-bit differences that BLAS thread counts cause
do not reach the files. A different BLAS library could still, rarely, flip one.
"""

from __future__ import annotations

import functools
import json
import logging
import pathlib
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from node_agent.inference.weights_file import save_mlx_safetensors

logger = logging.getLogger(__name__)

CORPUS_PATH = pathlib.Path(__file__).parent / "corpus" / "genesis_kjv.txt"
ARCHITECTURES = ("llama", "qwen2")

VOCAB_SIZE = 1024
HIDDEN_SIZE = 256
NUM_LAYERS = 4
NUM_HEADS = 4
NUM_KV_HEADS = 4
HEAD_DIM = HIDDEN_SIZE // NUM_HEADS
INTERMEDIATE_SIZE = 512
MAX_POSITION_EMBEDDINGS = 2048
ROPE_THETA = 10000.0
RMS_NORM_EPS = 1e-5

BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, *ROLE_TOKENS)
# Plain messages render as `<|role|>\ncontent</s>\n`. Tools render Qwen-style: their
# definitions in a system block, an assistant's calls as <tool_call> JSON blocks, and a
# tool's result as a <tool_response>.
PLAIN_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Qwen-style: tools in a system block, calls in <tool_call> tags; with enable_thinking true the
# generation prompt opens a <think> block (as Qwen3's thinking models do), off by default.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<|system|>\n# Tools\n\nYou may call one or more functions. "
    "Their signatures are within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "For each call, return a JSON object with the function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
    "{{ eos_token }}\n{% endif %}"
    "{% if reasoning_effort is defined %}<|system|>\nReasoning: {{ reasoning_effort }}"
    "{{ eos_token }}\n{% endif %}"
    "{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['role'] == 'tool' and message.tool_call_id is defined %}"
    "<tool_response>\n{{ message['content'] }}\n</tool_response>"
    "{% else %}{{ message['content'] or '' }}{% endif %}"
    "{% if message.tool_calls is defined %}{% for call in message.tool_calls %}"
    "<tool_call>\n{\"name\": \"{{ call.function.name }}\", \"arguments\": "
    "{{ call.function.arguments | tojson }}}\n</tool_call>{% endfor %}{% endif %}"
    "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n"
    "{% if enable_thinking is defined and enable_thinking %}<think>\n{% endif %}{% endif %}"
)

# Additive smoothing mass (in tokens) spread by the unigram distribution.
BIGRAM_SMOOTHING = 1.0
SKIP_SMOOTHING = 2.0
# Adam steps that refine the SVD start of each table towards maximum likelihood.
FIT_STEPS = 40
FIT_LEARNING_RATE = 0.03
# Below 1, naive Bayes double-counts less of the evidence the two tables share.
SKIP_WEIGHT = 0.6
REPEAT_PENALTY = 10.0
WINDOW_TOKENS = 30.0
# Widths of the residual stream given to skip-bigram features and identity codes;
# bigram features get what is left.
SKIP_RANK = 32
CODE_DIMS = 40
BIGRAM_RANK = HIDDEN_SIZE - 2 * (SKIP_RANK + 1) - 2 * CODE_DIMS - 2
# Shares of the embedding's squared norm (HIDDEN_SIZE, i.e. unit RMS) per block;
# a filler dimension takes the rest, so every embedding row has the same norm.
BIGRAM_SHARE = 0.55
SKIP_SHARE = 0.2
CODE_SHARE = 0.1
# Standard deviation, per residual dimension, that each random block adds.
RANDOM_OUTPUT_SCALE = 0.01
# Sharpness (logit gap to the neighbours) of the previous-token head, per RoPE pair.
PREVIOUS_HEAD_SHARPNESS = 16.0
PREVIOUS_HEAD_PAIRS = 16
# RoPE pair whose period (about 4700 positions) exceeds twice the context length.
WINDOW_HEAD_PAIR = 23


@dataclass(frozen=True)
class _Layout:
    """Which residual dimensions hold what; embeddings fill the first block."""

    bigram: slice
    skip: slice  # skip-bigram features plus their norm filler
    code: slice
    filler: int
    const: int
    previous: slice  # written by head 0: the previous token's `skip` block
    window: slice  # written by head 1: mean `code` over recent tokens


def _layout() -> _Layout:
    assert BIGRAM_RANK >= 64, "residual stream too narrow for the bigram features"
    edges = np.cumsum([0, BIGRAM_RANK, SKIP_RANK + 1, CODE_DIMS, 1, 1, SKIP_RANK + 1, CODE_DIMS])
    parts = [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
    assert parts[-1].stop == HIDDEN_SIZE
    return _Layout(
        bigram=parts[0], skip=parts[1], code=parts[2], filler=parts[3].start,
        const=parts[4].start, previous=parts[5], window=parts[6],
    )


@dataclass(frozen=True)
class _Factors:
    """Low-rank pieces of the combined bigram and skip-bigram logits."""

    bigram_in: np.ndarray  # (vocab, rank): features of the current token
    bigram_out: np.ndarray  # (vocab, rank): read out by lm_head
    skip_in: np.ndarray
    skip_out: np.ndarray
    bias: np.ndarray  # (vocab,): the part of every logit that ignores context


def build_tiny_model(
    out_dir: pathlib.Path, *, architecture: str = "llama", seed: int = 0
) -> pathlib.Path:
    """Write a complete model directory that `mlx_lm.load` opens offline; return it."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {ARCHITECTURES}, not {architecture!r}")
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_json, factors = _fit_corpus()
    tokenizer = Tokenizer.from_str(tokenizer_json)
    layout = _layout()
    weights = _model_weights(factors, layout, np.random.default_rng(seed), architecture)
    _write_weights(out_dir, weights)
    _write_config(out_dir, architecture, tokenizer)
    _write_tokenizer(out_dir, tokenizer)
    logger.info(
        "built tiny %s model (seed %d) in %s: %d parameters",
        architecture, seed, out_dir, sum(w.size for w in weights.values()),
    )
    return out_dir


@functools.lru_cache(maxsize=1)
def _fit_corpus() -> tuple[str, _Factors]:
    """Tokenizer and factors depend on the corpus alone, so later builds reuse them."""
    text = CORPUS_PATH.read_text(encoding="utf-8")
    tokenizer = _train_tokenizer(text)
    streams = _encode_chapters(tokenizer, text)
    factors = _factorize_tables(streams, bos_id=tokenizer.token_to_id(BOS_TOKEN))
    for array in vars(factors).values():
        array.setflags(write=False)  # shared by every later build in this process
    logger.debug("fitted tiny model to %d corpus tokens", sum(len(s) for s in streams))
    return tokenizer.to_str(), factors


def _train_tokenizer(text: str) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_chapters(text), trainer)
    assert tokenizer.get_vocab_size() == VOCAB_SIZE
    bos_id = tokenizer.token_to_id(BOS_TOKEN)
    # Prepend BOS on encode, as Hugging Face llama tokenizers do.
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", pair=f"{BOS_TOKEN} $A $B", special_tokens=[(BOS_TOKEN, bos_id)]
    )
    return tokenizer


def _chapters(text: str) -> list[str]:
    return [chapter.strip() + "\n" for chapter in text.split("\n\n") if chapter.strip()]


def _encode_chapters(tokenizer: Tokenizer, text: str) -> list[np.ndarray]:
    """Each chapter becomes one token stream starting with BOS."""
    return [np.array(e.ids, dtype=np.int64) for e in tokenizer.encode_batch(_chapters(text))]


def _factorize_tables(streams: list[np.ndarray], *, bos_id: int) -> _Factors:
    bigram_counts = np.zeros((VOCAB_SIZE, VOCAB_SIZE))
    skip_counts = np.zeros((VOCAB_SIZE, VOCAB_SIZE))
    for stream in streams:
        np.add.at(bigram_counts, (stream[:-1], stream[1:]), 1.0)
        np.add.at(skip_counts, (stream[:-2], stream[2:]), 1.0)
    unigram = np.bincount(np.concatenate(streams), minlength=VOCAB_SIZE) + 0.5
    unigram /= unigram.sum()
    # Head 0 sees BOS as "previous" at position 0, where it carries no evidence.
    skip_counts[bos_id] = 0.0
    bigram_in, bigram_out, bigram_bias = _fit_low_rank(
        bigram_counts, unigram, BIGRAM_SMOOTHING, BIGRAM_RANK
    )
    skip_in, skip_out, skip_bias = _fit_low_rank(skip_counts, unigram, SKIP_SMOOTHING, SKIP_RANK)
    return _Factors(
        bigram_in=bigram_in, bigram_out=bigram_out,
        skip_in=skip_in, skip_out=SKIP_WEIGHT * skip_out,
        bias=bigram_bias + SKIP_WEIGHT * (skip_bias - np.log(unigram)),
    )


def _fit_low_rank(
    counts: np.ndarray, unigram: np.ndarray, smoothing: float, rank: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Logits `left @ right.T + bias` whose softmax rows approximate the smoothed
    P(next | context), weighted by how often each context occurs.

    Truncated SVD of the log-probabilities starts it; a few Adam steps on the
    cross-entropy then fix what SVD gets wrong (it minimises squared error in
    log space, which wastes rank on rare contexts and loses their argmax).
    """
    target = (counts + smoothing * unigram) / (counts.sum(axis=1, keepdims=True) + smoothing)
    row_weights = counts.sum(axis=1) + smoothing
    row_weights /= row_weights.sum()
    left, right, bias = _svd_start(np.log(target), rank)
    parameters = [left, right, bias]
    moments = [(np.zeros_like(p), np.zeros_like(p)) for p in parameters]
    for step in range(1, FIT_STEPS + 1):
        logits = left @ right.T + bias
        probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        logit_gradient = (probabilities - target) * row_weights[:, None]
        gradients = [logit_gradient @ right, logit_gradient.T @ left, logit_gradient.sum(axis=0)]
        for parameter, gradient, (first, second) in zip(parameters, gradients, moments):
            _adam_update(parameter, gradient, first, second, step)
    return left, right, bias


def _adam_update(
    parameter: np.ndarray, gradient: np.ndarray, first: np.ndarray, second: np.ndarray, step: int
) -> None:
    first *= 0.9
    first += 0.1 * gradient
    second *= 0.999
    second += 0.001 * gradient**2
    step_size = FIT_LEARNING_RATE * np.sqrt(1 - 0.999**step) / (1 - 0.9**step)
    # Gradients are tiny (rows are weighted by frequency), hence the tiny epsilon.
    parameter -= step_size * first / (np.sqrt(second) + 1e-12)


def _svd_start(log_table: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row constants (dropped: softmax ignores them), column bias, and the best
    rank-`rank` product for the rest."""
    centred = log_table - log_table.mean(axis=1, keepdims=True)
    bias = centred.mean(axis=0)
    left, singular, right_t = np.linalg.svd(centred - bias)
    left, right = left[:, :rank], right_t[:rank].T
    # Fix each singular pair's sign so that different LAPACKs start from the same point.
    signs = np.sign(left[np.abs(left).argmax(axis=0), np.arange(rank)])
    root = np.sqrt(singular[:rank])
    return left * (signs * root), right * (signs * root), bias


@dataclass(frozen=True)
class _Scales:
    """Factors that put each feature block at its share of the embedding norm."""

    bigram: float
    skip: float
    code: float


def _model_weights(
    factors: _Factors, layout: _Layout, rng: np.random.Generator, architecture: str
) -> dict[str, np.ndarray]:
    codes = rng.standard_normal((VOCAB_SIZE, CODE_DIMS))
    codes /= np.linalg.norm(codes, axis=1, keepdims=True)
    embedding, scales = _embedding(factors, layout, codes)
    weights = {
        "model.embed_tokens.weight": embedding,
        "lm_head.weight": _lm_head(factors, layout, codes, scales),
        # The residual reaching the final norm also holds the previous token's block.
        "model.norm.weight": np.full(HIDDEN_SIZE, np.sqrt(1.0 + SKIP_SHARE)),
    }
    for index in range(NUM_LAYERS):
        layer = _random_layer(rng, architecture)
        if index == 0:
            _design_heads(layer, layout)
        weights.update({f"model.layers.{index}.{name}": value for name, value in layer.items()})
    return {name: _canonical(value) for name, value in sorted(weights.items())}


def _embedding(factors: _Factors, layout: _Layout, codes: np.ndarray) -> tuple[np.ndarray, _Scales]:
    embedding = np.zeros((VOCAB_SIZE, HIDDEN_SIZE))
    scales = _Scales(
        bigram=np.sqrt(BIGRAM_SHARE * HIDDEN_SIZE) / _max_row_norm(factors.bigram_in),
        # Leave the filler at least a tenth: sqrt near zero would amplify float noise.
        skip=np.sqrt(0.9 * SKIP_SHARE * HIDDEN_SIZE) / _max_row_norm(factors.skip_in),
        code=np.sqrt(CODE_SHARE * HIDDEN_SIZE),
    )
    embedding[:, layout.bigram] = factors.bigram_in * scales.bigram
    skip = factors.skip_in * scales.skip
    # A filler keeps the skip block's norm fixed: head 0 copies it whole, and the
    # copy must not change the residual norm that the RMSNorms divide by.
    skip_filler = np.sqrt(SKIP_SHARE * HIDDEN_SIZE - (skip**2).sum(axis=1))
    embedding[:, layout.skip] = np.column_stack([skip, skip_filler])
    embedding[:, layout.code] = codes * scales.code
    embedding[:, layout.const] = 1.0
    rest = HIDDEN_SIZE - (embedding**2).sum(axis=1)
    assert rest.min() > 0.1 * HIDDEN_SIZE
    embedding[:, layout.filler] = np.sqrt(rest)
    return embedding, scales


def _max_row_norm(matrix: np.ndarray) -> float:
    return float(np.linalg.norm(matrix, axis=1).max())


def _lm_head(factors: _Factors, layout: _Layout, codes: np.ndarray, scales: _Scales) -> np.ndarray:
    head = np.zeros((VOCAB_SIZE, HIDDEN_SIZE))
    head[:, layout.bigram] = factors.bigram_out / scales.bigram
    head[:, layout.previous.start : layout.previous.stop - 1] = factors.skip_out / scales.skip
    head[:, layout.const] = factors.bias
    head[:, layout.window] = -REPEAT_PENALTY * codes / scales.code
    return head


def _random_layer(rng: np.random.Generator, architecture: str) -> dict[str, np.ndarray]:
    """A block whose projections into attention and the MLP have unit scale, and
    whose projections back into the residual stream are small."""
    attention_width = NUM_HEADS * HEAD_DIM
    kv_width = NUM_KV_HEADS * HEAD_DIM
    small = RANDOM_OUTPUT_SCALE
    layer = {
        "self_attn.q_proj.weight": _gaussian(rng, attention_width, HIDDEN_SIZE, 1.0),
        "self_attn.k_proj.weight": _gaussian(rng, kv_width, HIDDEN_SIZE, 1.0),
        "self_attn.v_proj.weight": _gaussian(rng, kv_width, HIDDEN_SIZE, 1.0),
        "self_attn.o_proj.weight": _gaussian(rng, HIDDEN_SIZE, attention_width, small),
        "mlp.gate_proj.weight": _gaussian(rng, INTERMEDIATE_SIZE, HIDDEN_SIZE, 1.0),
        "mlp.up_proj.weight": _gaussian(rng, INTERMEDIATE_SIZE, HIDDEN_SIZE, 1.0),
        "mlp.down_proj.weight": _gaussian(rng, HIDDEN_SIZE, INTERMEDIATE_SIZE, small),
        "input_layernorm.weight": np.ones(HIDDEN_SIZE),
        "post_attention_layernorm.weight": np.ones(HIDDEN_SIZE),
    }
    if architecture == "qwen2":
        layer["self_attn.q_proj.bias"] = np.zeros(attention_width)
        layer["self_attn.k_proj.bias"] = np.zeros(kv_width)
        layer["self_attn.v_proj.bias"] = np.zeros(kv_width)
    return layer


def _gaussian(rng: np.random.Generator, rows: int, columns: int, output_scale: float) -> np.ndarray:
    """A linear layer's weight whose outputs have std `output_scale` for unit inputs."""
    return rng.standard_normal((rows, columns)) * (output_scale / np.sqrt(columns))


def _design_heads(layer: dict[str, np.ndarray], layout: _Layout) -> None:
    """Turn heads 0 and 1 of a random layer into the previous-token and window heads.

    Both read only the constant dimension for queries and keys, so where they look
    depends on RoPE positions alone. Layer 0's input is a unit-RMS embedding, so
    RMSNorm leaves the constant at 1 and the copied blocks at their size.
    """
    query, key = layer["self_attn.q_proj.weight"], layer["self_attn.k_proj.weight"]
    value, output = layer["self_attn.v_proj.weight"], layer["self_attn.o_proj.weight"]
    for head in (0, 1):
        rows = slice(head * HEAD_DIM, (head + 1) * HEAD_DIM)
        query[rows], key[rows], value[rows], output[:, rows] = 0.0, 0.0, 0.0, 0.0
    previous_query, previous_key = _previous_token_rope_vectors()
    query[:HEAD_DIM, layout.const] = previous_query
    key[:HEAD_DIM, layout.const] = previous_key
    window_query_key = _window_rope_vector()
    query[HEAD_DIM : 2 * HEAD_DIM, layout.const] = window_query_key
    key[HEAD_DIM : 2 * HEAD_DIM, layout.const] = window_query_key
    _copy_block(value, output, head=0, source=layout.skip, target=layout.previous)
    _copy_block(value, output, head=1, source=layout.code, target=layout.window)


def _rope_frequencies() -> np.ndarray:
    return ROPE_THETA ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)


def _previous_token_rope_vectors() -> tuple[np.ndarray, np.ndarray]:
    """q, k whose score after RoPE is sum_i c * cos((distance - 1) * theta_i).

    mlx-lm's RoPE multiplies pair (x_i, x_{i+half}) by exp(1j * position * theta_i),
    so rotating q back by one step puts every pair's peak at distance 1.
    """
    half = HEAD_DIM // 2
    theta = _rope_frequencies()[:PREVIOUS_HEAD_PAIRS]
    # Attention divides scores by sqrt(HEAD_DIM); put that back.
    amplitude = np.sqrt(PREVIOUS_HEAD_SHARPNESS * np.sqrt(HEAD_DIM))
    query, key = np.zeros(HEAD_DIM), np.zeros(HEAD_DIM)
    query[:PREVIOUS_HEAD_PAIRS] = amplitude * np.cos(theta)
    query[half : half + PREVIOUS_HEAD_PAIRS] = -amplitude * np.sin(theta)
    key[:PREVIOUS_HEAD_PAIRS] = amplitude
    return query, key


def _window_rope_vector() -> np.ndarray:
    """q = k giving score c * cos(distance * theta) ~ c - c * (distance * theta)**2 / 2:
    a Gaussian window of width WINDOW_TOKENS over the recent past."""
    theta = _rope_frequencies()[WINDOW_HEAD_PAIR]
    assert theta * MAX_POSITION_EMBEDDINGS < np.pi, "window would wrap around"
    vector = np.zeros(HEAD_DIM)
    vector[WINDOW_HEAD_PAIR] = HEAD_DIM**0.25 / (WINDOW_TOKENS * theta)
    return vector


def _copy_block(
    value: np.ndarray, output: np.ndarray, *, head: int, source: slice, target: slice
) -> None:
    """Route residual dimensions `source` through one head's values into `target`."""
    width = source.stop - source.start
    assert width == target.stop - target.start and width <= HEAD_DIM
    channels = np.arange(width) + head * HEAD_DIM
    value[channels, np.arange(source.start, source.stop)] = 1.0
    output[np.arange(target.start, target.stop), channels] = 1.0


def _canonical(array: np.ndarray) -> np.ndarray:
    """Round to float16 precision but store float32: tiny numeric noise from the
    SVD is rounded away, and float32 keeps CPU matmuls fast."""
    rounded = array.astype(np.float16)
    assert np.isfinite(rounded).all()
    return rounded.astype(np.float32)


def _write_weights(out_dir: pathlib.Path, weights: dict[str, np.ndarray]) -> None:
    save_mlx_safetensors(out_dir / "model.safetensors", weights)
    index = {
        "metadata": {"total_size": int(sum(value.nbytes for value in weights.values()))},
        "weight_map": {name: "model.safetensors" for name in weights},
    }
    _write_json(out_dir / "model.safetensors.index.json", index)


def _write_config(out_dir: pathlib.Path, architecture: str, tokenizer: Tokenizer) -> None:
    config = {
        "architectures": ["LlamaForCausalLM" if architecture == "llama" else "Qwen2ForCausalLM"],
        "model_type": architecture,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "rms_norm_eps": RMS_NORM_EPS,
        "rope_theta": ROPE_THETA,
        "vocab_size": VOCAB_SIZE,
        "tie_word_embeddings": False,
        "bos_token_id": tokenizer.token_to_id(BOS_TOKEN),
        "eos_token_id": tokenizer.token_to_id(EOS_TOKEN),
        "torch_dtype": "float32",
    }
    if architecture == "llama":
        config.update(attention_bias=False, mlp_bias=False)
    else:
        config.update(use_sliding_window=False)
    _write_json(out_dir / "config.json", config)


def _write_tokenizer(out_dir: pathlib.Path, tokenizer: Tokenizer) -> None:
    tokenizer.save(str(out_dir / "tokenizer.json"))
    special = {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": EOS_TOKEN}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "unk_token": None,
        "model_max_length": MAX_POSITION_EMBEDDINGS,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    _write_json(out_dir / "tokenizer_config.json", config)
    _write_json(out_dir / "special_tokens_map.json", special)


def _write_json(path: pathlib.Path, content: dict) -> None:
    path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n", encoding="utf-8")
