"""The compiled planner (setup.py) and the same source run as plain Python make the same decisions,
with the same explanations, on a loaded fleet that commits and releases."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.placement.compiled import build_status

ROOT = Path(__file__).resolve().parents[3]
DIGEST = [sys.executable, "-m", "bench.placement_digest",
          "--macs", "3000", "--pods", "150", "--jobs", "2500", "--running", "1500"]


def _digest(cwd: Path) -> list[str]:
    environment = {**os.environ, "PYTHONPATH": str(cwd)}  # ahead of the installed (editable) project
    result = subprocess.run(DIGEST, cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_plain_python_and_compiled_planners_decide_alike(tmp_path: Path) -> None:
    if not build_status().compiled:
        pytest.skip("the planner is plain Python here (MLXNET_PURE_PYTHON): no compiled one to compare")
    for package in ("contracts", "coordinator", "bench"):  # the source alone, without the extensions
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    compiled, plain = _digest(ROOT), _digest(tmp_path)
    assert compiled[0] == "placement planner: compiled with mypyc"
    assert plain[0] == "placement planner: plain Python (not compiled: see setup.py)"
    assert compiled[1:] == plain[1:]
    assert compiled[1].startswith("5000 decisions: decision digest ")
