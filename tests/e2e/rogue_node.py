"""A node agent with altered software, as a cheating operator would run it:
`python -m tests.e2e.rogue_node [mlxnet node flags...]`.

It registers the honest model (so its declared weights digest is the true one) and then:

    MLXNET_ROGUE_JOBS_MODEL=DIR     generates every job with the model in DIR (a cheap copy)
    MLXNET_ROGUE_CHECKS_MODEL=DIR   replays every peer's job it checks with the model in DIR,
                                    so its check results lie about honest work
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import numpy as np

from mlxnet import cli, node_main
from node_agent.inference.engine import Engine

JOBS_MODEL = os.environ.get("MLXNET_ROGUE_JOBS_MODEL", "")
CHECKS_MODEL = os.environ.get("MLXNET_ROGUE_CHECKS_MODEL", "")


class RogueEngine(Engine):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._checking = False

    def _model(self, path: str) -> tuple:
        if JOBS_MODEL and not self._checking and path != CHECKS_MODEL:
            path = JOBS_MODEL
        return super()._model(path)

    def replay(self, model_path: str, prompt: str, output_ids: tuple[int, ...],
               check_step: Callable[[int, np.ndarray], object]):  # type: ignore[no-untyped-def]
        self._checking = True
        try:
            return super().replay(CHECKS_MODEL or model_path, prompt, output_ids, check_step)
        finally:
            self._checking = False

    def end_token_ids(self, model_path: str) -> frozenset[int]:
        self._checking = True
        try:
            return super().end_token_ids(model_path)
        finally:
            self._checking = False


if __name__ == "__main__":
    node_main.Engine = RogueEngine  # type: ignore[misc]  # the altered build
    sys.exit(cli.main(sys.argv[1:]))
