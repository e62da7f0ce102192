"""Fixtures for the adversarial suite: one MLX engine, the cheating models, the coordinator's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.inference.engine import Engine
from tests.adversarial.harness import Coordinator


@pytest.fixture(scope="session")
def proof_engine() -> Engine:
    return Engine()


@pytest.fixture(scope="session")
def cheat_model_dirs(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Path]:
    from tests.adversarial.models import build_cheat_models

    return build_cheat_models(tiny_model_dir, tmp_path_factory.mktemp("cheat-models"))


@pytest.fixture(scope="session")
def checks(proof_engine: Engine, tiny_model_dir: Path) -> Coordinator:
    return Coordinator(proof_engine, tiny_model_dir)
