"""The launchd plist and systemd unit, checked as text (and parsed back where a parser exists)."""

from __future__ import annotations

import plistlib
from pathlib import Path

from node_agent.service_files import (
    LAUNCHD_LABEL, ServiceSpec, launchd_load_command, launchd_plist, launchd_plist_path,
    systemd_unit, systemd_unit_path,
)

SPEC = ServiceSpec(python=Path("/Users/alice/mlxnet/.venv/bin/python"),
                   data_dir=Path("/Users/alice/.mlxnet/node"), home=Path("/Users/alice"),
                   handback_after_s=30.0, user="alice")


def test_the_launch_agent_runs_the_node_restarts_after_crashes_and_logs_to_library_logs() -> None:
    job = plistlib.loads(launchd_plist(SPEC).encode())
    assert job["Label"] == LAUNCHD_LABEL
    assert job["ProgramArguments"] == ["/Users/alice/mlxnet/.venv/bin/python", "-m", "mlxnet.cli",
                                       "node", "--data-dir", "/Users/alice/.mlxnet/node"]
    assert job["RunAtLoad"] is True and job["KeepAlive"] == {"SuccessfulExit": False}
    assert job["StandardErrorPath"] == "/Users/alice/Library/Logs/mlxnet/node.log"
    assert "/usr/sbin" in job["EnvironmentVariables"]["PATH"]  # system_profiler, sysctl
    assert job["ExitTimeOut"] == 60  # the hand-back bound plus time to deregister
    assert "UserName" not in job
    assert launchd_plist_path(SPEC, False) == Path(
        "/Users/alice/Library/LaunchAgents/org.mlxnetwork.node.plist")
    assert launchd_load_command(SPEC, False).startswith("launchctl bootstrap gui/$(id -u) ")


def test_a_launch_daemon_for_dedicated_seats_runs_as_the_operator() -> None:
    job = plistlib.loads(launchd_plist(SPEC, system=True).encode())
    assert job["UserName"] == "alice"
    assert launchd_plist_path(SPEC, True) == Path("/Library/LaunchDaemons/org.mlxnetwork.node.plist")
    assert launchd_load_command(SPEC, True).startswith("launchctl bootstrap system ")


def test_the_systemd_user_unit() -> None:
    unit = systemd_unit(SPEC)
    assert ("ExecStart=/Users/alice/mlxnet/.venv/bin/python -m mlxnet.cli node --data-dir "
            "/Users/alice/.mlxnet/node") in unit
    assert "Restart=on-failure" in unit and "TimeoutStopSec=60" in unit
    assert "WantedBy=default.target" in unit
    assert systemd_unit_path(SPEC) == Path("/Users/alice/.config/systemd/user/mlxnet-node.service")
