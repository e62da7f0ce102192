"""The coordinator's verifier: `--verify-model [ID=]PATH` models, replayed in a child process.

The parent reads each model's id and weights digest from its files (no MLX); the child
(coordinator.verification.isolated) builds the MLX replayer with build_replayer.
"""

from __future__ import annotations

import functools
from pathlib import Path

from contracts.models import ModelSpec
from coordinator.verification.isolated import ChildProcessChecker, ReplayerRecipe
from node_agent.model_files import describe_model


def build_replayer(held: dict[str, tuple[str, str]]):  # type: ignore[no-untyped-def]
    """In the replay child: the MLX engine for the held models (model id -> (directory, digest))."""
    from node_agent.inference.engine import Engine, LocalReplayer

    return LocalReplayer(Engine(), held)


def verified_specs(values: list[str]) -> dict[str, tuple[str, ModelSpec]]:
    """model id -> (directory, spec) for each `[ID=]PATH`, read from the files (no MLX)."""
    specs = {}
    for value in values:
        model_id, _, path = value.rpartition("=")
        directory = Path(path).expanduser().resolve()
        spec = describe_model(model_id or str(directory), directory)
        specs[spec.model_id] = (str(directory), spec)
    return specs


def child_checker(specs: dict[str, tuple[str, ModelSpec]]) -> ChildProcessChecker | None:
    """The verifier for these models, None without any."""
    if not specs:
        return None
    held = {model_id: (directory, spec.weights_digest) for model_id, (directory, spec) in specs.items()}
    recipe = ReplayerRecipe(functools.partial(build_replayer, held),
                            tuple((model_id, digest) for model_id, (_, digest) in held.items()))
    return ChildProcessChecker(recipe)
