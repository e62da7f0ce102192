"""The project's tiny model: its files load in mlx-lm, builds are reproducible,
and greedy output is made of corpus words rather than noise."""

import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys

import mlx.core as mx
import mlx_lm
import pytest

from node_agent.tiny_model import CORPUS_PATH, build_tiny_model

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return build_tiny_model(tmp_path_factory.mktemp("llama") / "model")


@pytest.fixture(scope="module")
def llama(llama_dir: pathlib.Path):
    return mlx_lm.load(str(llama_dir))


@pytest.fixture(scope="module")
def corpus_words() -> set[str]:
    return set(_words(CORPUS_PATH.read_text(encoding="utf-8")))


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z']+", text)


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _greedy(model, tokenizer, prompt: str, max_tokens: int) -> tuple[list[int], str]:
    responses = list(mlx_lm.stream_generate(model, tokenizer, prompt, max_tokens=max_tokens))
    return [r.token for r in responses], "".join(r.text for r in responses)


def test_writes_every_file_of_a_hugging_face_model(llama_dir: pathlib.Path) -> None:
    assert sorted(p.name for p in llama_dir.iterdir()) == sorted(MODEL_FILES)
    config = json.loads((llama_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["tie_word_embeddings"] is False
    assert config["max_position_embeddings"] == 2048
    # Tensor-parallel pods of 2 or 4 split heads evenly.
    assert config["num_attention_heads"] % 4 == 0
    assert config["num_key_value_heads"] % 4 == 0
    assert config["num_hidden_layers"] >= 4


def test_index_matches_the_weights_file(llama_dir: pathlib.Path) -> None:
    weights, metadata = mx.load(str(llama_dir / "model.safetensors"), return_metadata=True)
    index = json.loads((llama_dir / "model.safetensors.index.json").read_text())
    assert metadata == {"format": "mlx"}
    assert index["weight_map"] == {name: "model.safetensors" for name in weights}
    assert index["metadata"]["total_size"] == sum(w.nbytes for w in weights.values())
    assert all(w.dtype == mx.float32 for w in weights.values())
    assert sum(w.size for w in weights.values()) < 5_000_000


def test_tokenizer_has_chat_template_and_special_tokens(llama) -> None:
    _, tokenizer = llama
    assert tokenizer.bos_token == "<s>" and tokenizer.eos_token == "</s>"
    assert 512 <= tokenizer.vocab_size <= 2048
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Who made the earth?"},
    ]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt == (
        "<s><|system|>\nBe brief.</s>\n<|user|>\nWho made the earth?</s>\n<|assistant|>\n"
    )
    assert tokenizer.encode("In the beginning")[0] == tokenizer.bos_token_id


def test_same_seed_gives_identical_bytes_in_another_process(
    llama_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    script = (
        "import pathlib, sys; from node_agent.tiny_model import build_tiny_model; "
        "build_tiny_model(pathlib.Path(sys.argv[1]))"
    )
    # A different BLAS thread count must not change a bit either.
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=REPO_ROOT, env=environment, check=True, timeout=120,
    )
    for name in MODEL_FILES:
        assert _sha256(tmp_path / name) == _sha256(llama_dir / name), name


def test_different_seed_gives_different_weights(
    llama_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    other = build_tiny_model(tmp_path, seed=1)
    assert _sha256(other / "model.safetensors") != _sha256(llama_dir / "model.safetensors")
    # The tokenizer depends on the corpus alone.
    assert _sha256(other / "tokenizer.json") == _sha256(llama_dir / "tokenizer.json")


@pytest.mark.parametrize("prompt", ["The", "And God said"])
def test_greedy_output_is_varied_corpus_words(llama, corpus_words: set[str], prompt: str) -> None:
    model, tokenizer = llama
    tokens, text = _greedy(model, tokenizer, prompt, max_tokens=30)
    assert len(tokens) == 30, "the model should not stop early on EOS"
    assert len(set(tokens)) >= 12, text
    words = _words(text)
    assert len(words) >= 12, text
    known = [word for word in words if word in corpus_words]
    assert len(known) >= 0.8 * len(words), text


def test_greedy_decoding_is_repeatable(llama) -> None:
    model, tokenizer = llama
    first = _greedy(model, tokenizer, "In the beginning", max_tokens=20)
    assert _greedy(model, tokenizer, "In the beginning", max_tokens=20) == first


def test_qwen2_builds_and_loads(tmp_path: pathlib.Path, corpus_words: set[str]) -> None:
    model_dir = build_tiny_model(tmp_path, architecture="qwen2")
    config = json.loads((model_dir / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    model, tokenizer = mlx_lm.load(str(model_dir))
    assert hasattr(model.model, "pipeline"), "qwen2 is the family with pipeline support"
    tokens, text = _greedy(model, tokenizer, "And God said", max_tokens=20)
    assert len(set(tokens)) >= 8, text
    words = _words(text)
    assert sum(word in corpus_words for word in words) >= 0.8 * len(words), text


def test_rejects_unknown_architecture(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="architecture"):
        build_tiny_model(tmp_path, architecture="gpt2")
