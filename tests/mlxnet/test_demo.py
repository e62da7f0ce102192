"""`make demo`'s command, run as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.e2e
def test_demo_runs_the_main_job_and_exits_zero(tmp_path: Path) -> None:
    completed = subprocess.run([sys.executable, "-m", "mlxnet.cli", "demo", "--work-dir", str(tmp_path)],
                               capture_output=True, text=True, timeout=600, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.count("receipt verified") == 5
    for operator in ("alice", "bob", "carol"):
        assert f"  {operator} " in completed.stdout
    assert "operator balances" in completed.stdout
    # An epoch closed and was anchored on the coordinator's anvil; one payout checked on chain and claimed.
    assert "proof VERIFIED against the root on chain" in completed.stdout
    assert "claimed from" in completed.stdout and "mlxnet ledger verify-proof --proof" in completed.stdout
