"""Reads a model directory's files into a ModelSpec, without loading the weights.

The parameter count comes from the safetensors headers; a quantized tensor
(packed uint32) counts 32 / bits parameters per element.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from contracts.models import ModelSpec
from node_agent import chat_templates

_HEADER_BYTES_MAX = 100 * 1024 * 1024
_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U32": 4,
                "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_HASH_CHUNK_BYTES = 8 * 1024 * 1024


class ModelFilesError(ValueError):
    """The directory is not a loadable MLX model."""


def _safetensors_header(path: Path) -> dict:
    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        if size > _HEADER_BYTES_MAX:
            raise ModelFilesError(f"{path.name}: safetensors header is implausibly large")
        return json.loads(handle.read(size))


def _parameter_count(files: list[Path], bits: int | None) -> int:
    count = 0
    for path in files:
        for name, tensor in _safetensors_header(path).items():
            if name == "__metadata__" or name.endswith((".scales", ".biases")):
                continue
            elements = 1
            for dim in tensor["shape"]:
                elements *= dim
            packed = bits is not None and tensor["dtype"] == "U32"
            count += elements * 32 // bits if packed and bits else elements
    return count


def activation_bytes_per_element(files: list[Path]) -> int:
    """Bytes of the model's float dtype, which its activations and KV cache use."""
    for path in files:
        for name, tensor in _safetensors_header(path).items():
            if name != "__metadata__" and tensor["dtype"] in ("F32", "F16", "BF16"):
                return _DTYPE_BYTES[tensor["dtype"]]
    return 2


def weights_digest(files: list[Path]) -> str:
    """sha256 over each weight file's name and bytes, in name order."""
    hasher = hashlib.sha256()
    for path in sorted(files):
        hasher.update(path.name.encode() + b"\x00")
        with path.open("rb") as handle:
            while chunk := handle.read(_HASH_CHUNK_BYTES):
                hasher.update(chunk)
    return hasher.hexdigest()


def describe_model(model_id: str, directory: Path) -> ModelSpec:
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ModelFilesError(f"{directory} has no config.json; pass a model directory")
    config = json.loads(config_path.read_text())
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelFilesError(f"{directory} has no .safetensors weight files")
    quantization = config.get("quantization") or {}
    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    return ModelSpec(
        model_id=model_id,
        weights_bytes=sum(f.stat().st_size for f in files),
        parameter_count=_parameter_count(files, quantization.get("bits")),
        num_layers=config["num_hidden_layers"],
        num_attention_heads=heads,
        num_kv_heads=config.get("num_key_value_heads", heads),
        head_dim=config.get("head_dim") or hidden // heads,
        max_context_tokens=config.get("max_position_embeddings", 2048),
        kv_bytes_per_element=activation_bytes_per_element(files),
        weights_digest=weights_digest(files),
        chat_features=chat_templates.chat_features(chat_templates.template_text(directory)),
    )
