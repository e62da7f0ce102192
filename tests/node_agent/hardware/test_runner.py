"""subprocess_runner against real commands on this host, and what the package may import."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import node_agent.hardware
from node_agent.hardware import CommandError, subprocess_runner


def test_returns_stdout() -> None:
    assert subprocess_runner([sys.executable, "-c", "print('enabled')"], 30) == "enabled\n"


def test_non_zero_exit_is_a_command_error() -> None:
    argv = [sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"]
    with pytest.raises(CommandError, match="exit status 3: boom"):
        subprocess_runner(argv, 30)


def test_missing_command_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="not found"):
        subprocess_runner(["mlxnet-no-such-command-here"], 5)


def test_timeout_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="no answer within"):
        subprocess_runner([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)


def test_hardware_package_never_imports_mlx() -> None:
    # The caller passes mx.device_info() in; only one module of the project imports MLX.
    package = Path(node_agent.hardware.__file__).parent
    for module in package.glob("*.py"):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        imported |= {
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        }
        roots = {name.split(".")[0] for name in imported}
        assert not roots & {"mlx", "mlx_lm", "ledger", "coordinator"}, module.name
