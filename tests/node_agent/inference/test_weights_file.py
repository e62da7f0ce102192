"""The weights file a builder writes: MLX's safetensors, read back as written."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np

from node_agent.inference.weights_file import save_mlx_safetensors


def test_weights_are_written_in_mlx_format_and_read_back_unchanged(tmp_path: Path) -> None:
    weights = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
               "b.bias": np.array([0.5, -1.0], dtype=np.float32)}
    path = tmp_path / "model.safetensors"
    save_mlx_safetensors(path, weights)
    data = path.read_bytes()
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    assert header["__metadata__"] == {"format": "mlx"}
    assert header["a.weight"]["shape"] == [2, 3] and header["b.bias"]["dtype"] == "F32"
    loaded = mx.load(str(path))
    assert all(np.array_equal(np.array(loaded[name]), value) for name, value in weights.items())
