"""Writes a model's weights as MLX's safetensors file, so builders need not import mlx."""

from __future__ import annotations

import pathlib

import mlx.core as mx
import numpy as np


def save_mlx_safetensors(path: pathlib.Path, weights: dict[str, np.ndarray]) -> None:
    """The file mlx_lm.load reads, tagged as MLX's format."""
    mx.save_safetensors(str(path), {name: mx.array(value) for name, value in weights.items()},
                        metadata={"format": "mlx"})
