"""The short chaos run (bench/chaos.py): real processes on PostgreSQL, one fault of each kind
that matters most, and then every job and transfer checked (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import PostgresCluster, Settings, print_report, run
from tests.conftest import postgres_admin_url

pytestmark = pytest.mark.e2e

KINDS = ("node_kill_midstream", "coordinator_kill", "network_cut", "postgres_restart_immediate")


def test_a_short_chaos_run_loses_doubles_and_overpays_nothing(
        tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    own_cluster = PostgresCluster.available()
    if not own_cluster and postgres_admin_url() is None:
        pytest.skip("neither initdb nor a reachable PostgreSQL server")
    settings = Settings(jobs=30, faults=len(KINDS), clients=2, nodes=2, kinds=KINDS,
                        own_cluster=own_cluster)
    report = run(settings, tmp_path, tiny_model_dir)
    with capsys.disabled():
        print_report(report)
    assert report.faults == {kind: 1 for kind in KINDS}
    assert (report.completed, report.lost, report.stuck) == (settings.jobs, [], [])
    assert (report.doubled, report.wrong_job, report.double_payments) == ([], [], [])
    assert report.credits_without_receipt == [] and report.audit_differences == []
    assert report.reservations_open == 0
    assert report.ok
