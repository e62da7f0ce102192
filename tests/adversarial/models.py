"""The wrong models cheating nodes run, built from the project's tiny model in seconds.

- another seed: same architecture and corpus statistics, different random layers;
- another architecture: the qwen2 variant with yet another seed;
- a lower-precision copy: the right weights cast to float16 or bfloat16;
- a quantized copy: the right model quantized to 8 or 4 bits by mlx-lm.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import mlx.core as mx
from mlx_lm import load
from mlx_lm.utils import load_config, quantize_model, save_config, save_model

from node_agent.tiny_model import build_tiny_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
CHEAT_MODELS = ("other-seed", "qwen2", "float16", "bfloat16", "q8", "q4")


def _copy_tokenizer(source: Path, target: Path) -> None:
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, target / name)


def cast_copy(source: Path, target: Path, dtype: mx.Dtype) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    weights = mx.load(str(source / "model.safetensors"))
    mx.save_safetensors(str(target / "model.safetensors"),
                        {name: value.astype(dtype) for name, value in weights.items()},
                        metadata={"format": "mlx"})
    for name in ("config.json", "model.safetensors.index.json", *TOKENIZER_FILES):
        shutil.copy(source / name, target / name)
    return target


def quantized_copy(source: Path, target: Path, bits: int) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    model, _ = load(str(source))
    model, config = quantize_model(model, load_config(source), group_size=64, bits=bits)
    save_model(target, model)
    save_config(config, target / "config.json")
    _copy_tokenizer(source, target)
    return target


def build_cheat_models(honest: Path, work_dir: Path) -> dict[str, Path]:
    return {
        "other-seed": build_tiny_model(work_dir / "other-seed", seed=1),
        "qwen2": build_tiny_model(work_dir / "qwen2", architecture="qwen2", seed=2),
        "float16": cast_copy(honest, work_dir / "float16", mx.float16),
        "bfloat16": cast_copy(honest, work_dir / "bfloat16", mx.bfloat16),
        "q8": quantized_copy(honest, work_dir / "q8", 8),
        "q4": quantized_copy(honest, work_dir / "q4", 4),
    }
