"""The coordinator's verifier: `--verify-model [ID=]PATH` models, replayed in a child process.

The parent reads each model's id and weights digest from its files (no MLX); the child
(coordinator.verification.isolated) builds the MLX replayer with build_replayer. It always
holds the self-benchmark's reference model too (its digest is pinned; the child builds it
offline in the data dir on first use), so it can replay every challenge benchmark's answer.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from contracts.benchmarks import REFERENCE_MODEL_ID, REFERENCE_WEIGHTS_DIGEST
from contracts.models import ModelSpec
from coordinator.verification.isolated import CHILD_START_TIMEOUT_S, ChildProcessChecker, ReplayerRecipe
from node_agent.model_files import describe_model


REFERENCE_BUILD_TIMEOUT_S = 300.0


def build_replayer(held: dict[str, tuple[str, str]], reference_dir: str | None = None):  # type: ignore[no-untyped-def]
    """In the replay child: the MLX engine for the held models (model id -> (directory, digest)).
    The reference model is built here on first use, so a coordinator starts without waiting for it."""
    from node_agent.inference.engine import Engine, LocalReplayer

    if reference_dir is not None:
        ensure_reference_model(Path(reference_dir))
    return LocalReplayer(Engine(), held)


def ensure_reference_model(directory: Path) -> None:
    """Build the reference model in directory unless it is there (numpy only; seconds, or a minute
    on a loaded machine). Raises ValueError when the build no longer makes the pinned bytes."""
    from node_agent.tiny_model import build_tiny_model

    if not directory.exists():
        partial = directory.with_name(directory.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)  # a build cut short before
        build_tiny_model(partial)
        partial.rename(directory)  # whole or not at all
    digest = describe_model(REFERENCE_MODEL_ID, directory).weights_digest
    if digest != REFERENCE_WEIGHTS_DIGEST:
        raise ValueError(f"the reference model in {directory} has weights {digest}, not the pinned "
                         f"{REFERENCE_WEIGHTS_DIGEST}: challenge answers cannot be replayed")


def verified_specs(values: list[str]) -> dict[str, tuple[str, ModelSpec]]:
    """model id -> (directory, spec) for each `[ID=]PATH`, read from the files (no MLX)."""
    specs = {}
    for value in values:
        model_id, _, path = value.rpartition("=")
        directory = Path(path).expanduser().resolve()
        spec = describe_model(model_id or str(directory), directory)
        specs[spec.model_id] = (str(directory), spec)
    return specs


def child_checker(specs: dict[str, tuple[str, ModelSpec]], reference_dir: Path | None = None) -> ChildProcessChecker | None:
    """The verifier for these models and, with a reference_dir, the reference model that every
    challenge benchmark is decoded on; None with neither."""
    held = {model_id: (directory, spec.weights_digest) for model_id, (directory, spec) in specs.items()}
    if reference_dir is not None:
        held[REFERENCE_MODEL_ID] = (str(reference_dir), REFERENCE_WEIGHTS_DIGEST)
    if not held:
        return None
    recipe = ReplayerRecipe(functools.partial(build_replayer, held,
                                              None if reference_dir is None else str(reference_dir)),
                            tuple((model_id, digest) for model_id, (_, digest) in held.items()))
    # The first start may build the reference model: on a loaded machine that takes a minute or two.
    start_timeout_s = CHILD_START_TIMEOUT_S + (REFERENCE_BUILD_TIMEOUT_S if reference_dir is not None else 0.0)
    return ChildProcessChecker(recipe, start_timeout_s=start_timeout_s)
