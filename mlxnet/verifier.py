"""The coordinator's verifier: `--verify-model [ID=]PATH` models, replayed in a child process.

The parent reads each model's id and weights digest from its files (no MLX); the child
(coordinator.verification.isolated) builds the MLX replayer with build_replayer. It always
holds the self-benchmark's reference model too, built offline in the data dir, so it can
replay every challenge benchmark's answer.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from contracts.benchmarks import REFERENCE_MODEL_ID
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


def reference_spec(data_dir: Path) -> dict[str, tuple[str, ModelSpec]]:
    """The reference model (REFERENCE_MODEL_ID), built once in data_dir (numpy only, seconds):
    the same bytes every node benchmarks and answers challenges on."""
    from node_agent.tiny_model import build_tiny_model

    directory = data_dir / "reference-model"
    if not directory.exists():
        partial = data_dir / "reference-model.partial"
        shutil.rmtree(partial, ignore_errors=True)  # a build cut short before
        build_tiny_model(partial)
        partial.rename(directory)  # whole or not at all
    return {REFERENCE_MODEL_ID: (str(directory), describe_model(REFERENCE_MODEL_ID, directory))}
