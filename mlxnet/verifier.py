"""The coordinator's verifier: `--verify-model [ID=]PATH` models, replayed in a child process.

The parent reads each model's id and weights digest from its files (no MLX); the child
(coordinator.verification.isolated) builds the MLX replayer with build_replayer.
"""

from __future__ import annotations

import functools
from pathlib import Path

from coordinator.verification.isolated import ChildProcessChecker, ReplayerRecipe
from node_agent.model_files import describe_model


def build_replayer(held: dict[str, tuple[str, str]]):  # type: ignore[no-untyped-def]
    """In the replay child: the MLX engine for the held models (model id -> (directory, digest))."""
    from node_agent.inference.engine import Engine, LocalReplayer

    return LocalReplayer(Engine(), held)


def held_models(values: list[str]) -> dict[str, tuple[str, str]]:
    """model id -> (directory, weights digest) for each `[ID=]PATH`."""
    held = {}
    for value in values:
        model_id, _, path = value.rpartition("=")
        directory = Path(path).expanduser().resolve()
        spec = describe_model(model_id or str(directory), directory)
        held[spec.model_id] = (str(directory), spec.weights_digest)
    return held


def child_checker(values: list[str]) -> ChildProcessChecker | None:
    """The verifier for `--verify-model` values, None without any."""
    if not values:
        return None
    held = held_models(values)
    recipe = ReplayerRecipe(functools.partial(build_replayer, held),
                            tuple((model_id, digest) for model_id, (_, digest) in held.items()))
    return ChildProcessChecker(recipe)
