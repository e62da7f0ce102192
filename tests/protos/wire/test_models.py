"""ModelSpec over the wire: one conversion, below both the coordinator and the node agent."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import protos.wire
from contracts.models import ModelSpec
from protos.mlxnet.v1 import common_pb2
from protos.wire.models import model_spec_from_pb, model_spec_to_pb

SPEC = ModelSpec(model_id="mlxnet/tiny", weights_bytes=12_000_000, parameter_count=3_100_000,
                 num_layers=4, num_attention_heads=4, num_kv_heads=2, head_dim=64,
                 max_context_tokens=2048, kv_bytes_per_element=4, weights_digest="ab" * 32)


def test_a_spec_survives_the_round_trip() -> None:
    message = model_spec_to_pb(SPEC)
    assert model_spec_from_pb(common_pb2.ModelSpec.FromString(message.SerializeToString())) == SPEC


def test_a_spec_without_kv_bytes_is_read_as_fp16() -> None:
    message = model_spec_to_pb(SPEC)
    message.ClearField("kv_bytes_per_element")
    assert model_spec_from_pb(message).kv_bytes_per_element == 2


def test_a_spec_with_no_layers_breaks_the_specs_invariant() -> None:
    message = model_spec_to_pb(SPEC)
    message.num_layers = 0
    with pytest.raises(AssertionError):  # the coordinator turns this into InvalidRequest
        model_spec_from_pb(message)


def test_the_wire_package_imports_only_contracts_and_generated_code() -> None:
    for module in Path(protos.wire.__file__).parent.glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom)}
        ours = {name for name in imported if name.split(".")[0] in
                {"contracts", "protos", "coordinator", "node_agent", "ledger", "mlxnet"}}
        assert all(name.startswith(("contracts", "protos.mlxnet.v1", "protos.wire"))
                   for name in ours), (module.name, ours)
