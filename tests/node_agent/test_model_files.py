from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from node_agent.model_files import ModelFilesError, describe_model


def test_tiny_model_spec_matches_its_files(tiny_model_dir: Path) -> None:
    spec = describe_model("tiny", tiny_model_dir)
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert spec.num_layers == config["num_hidden_layers"]
    assert spec.num_kv_heads == config["num_key_value_heads"]
    assert spec.head_dim == config["hidden_size"] // config["num_attention_heads"]
    assert spec.weights_bytes == (tiny_model_dir / "model.safetensors").stat().st_size
    # fp32 weights: four bytes a parameter, plus the small safetensors header.
    assert 0 < spec.weights_bytes - 4 * spec.parameter_count < 100_000
    assert len(spec.weights_digest) == 64


def test_digest_changes_with_any_weight_byte(tiny_model_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model_dir, copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    assert describe_model("m", copy).weights_digest != describe_model("m", tiny_model_dir).weights_digest


def test_a_directory_without_a_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelFilesError, match="config.json"):
        describe_model("m", tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelFilesError, match="safetensors"):
        describe_model("m", tmp_path)
