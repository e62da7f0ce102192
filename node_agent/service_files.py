"""Run the agent as a service: a launchd plist on macOS, a systemd unit on Linux. Pure text.

macOS: a LaunchAgent (~/Library/LaunchAgents, runs while the owner is logged in,
right for idle lending) or, with system=True, a LaunchDaemon (/Library/LaunchDaemons,
runs at boot with nobody logged in, right for a dedicated seat). launchd restarts
the agent if it crashes but not after `mlxnet node leave` (a clean exit). Logs
go to ~/Library/Logs/mlxnet/ (Console.app shows them). PATH holds /usr/sbin for
system_profiler and sysctl. ExitTimeOut gives the agent time to hand work back.

Linux: a systemd user unit (~/.config/systemd/user); logs go to the journal
(`journalctl --user -u mlxnet-node`).
"""

from __future__ import annotations

import plistlib
import shlex
from dataclasses import dataclass
from pathlib import Path

LAUNCHD_LABEL = "org.mlxnetwork.node"
SYSTEMD_UNIT_NAME = "mlxnet-node.service"
LAUNCHD_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
STOP_GRACE_S = 30  # beyond the hand-back bound, for deregistering


@dataclass(frozen=True)
class ServiceSpec:
    python: Path  # the interpreter of the virtualenv mlxnet is installed in
    data_dir: Path
    home: Path
    handback_after_s: float
    user: str = ""  # LaunchDaemons only: run as this user rather than root

    @property
    def argv(self) -> list[str]:
        return [str(self.python), "-m", "mlxnet.cli", "node", "--data-dir", str(self.data_dir)]

    @property
    def stop_timeout_s(self) -> int:
        return int(self.handback_after_s) + STOP_GRACE_S


def launchd_plist_path(spec: ServiceSpec, system: bool) -> Path:
    folder = Path("/Library/LaunchDaemons") if system else spec.home / "Library" / "LaunchAgents"
    return folder / f"{LAUNCHD_LABEL}.plist"


def launchd_log_dir(spec: ServiceSpec) -> Path:
    return spec.home / "Library" / "Logs" / "mlxnet"


def launchd_plist(spec: ServiceSpec, system: bool = False) -> str:
    logs = launchd_log_dir(spec)
    job: dict[str, object] = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": spec.argv,
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},  # restart after a crash, not after leaving
        "ThrottleInterval": 10,
        "ExitTimeOut": spec.stop_timeout_s,
        "StandardOutPath": str(logs / "node.out.log"),
        "StandardErrorPath": str(logs / "node.log"),
        "EnvironmentVariables": {"PATH": LAUNCHD_PATH, "PYTHONUNBUFFERED": "1"},
        "WorkingDirectory": str(spec.data_dir),
    }
    if system and spec.user:
        job["UserName"] = spec.user
    return plistlib.dumps(job, sort_keys=False).decode()


def launchd_load_command(spec: ServiceSpec, system: bool) -> str:
    path = shlex.quote(str(launchd_plist_path(spec, system)))
    domain = "system" if system else "gui/$(id -u)"
    return f"launchctl bootstrap {domain} {path}"


def systemd_unit_path(spec: ServiceSpec) -> Path:
    return spec.home / ".config" / "systemd" / "user" / SYSTEMD_UNIT_NAME


def systemd_unit(spec: ServiceSpec) -> str:
    return "\n".join([
        "[Unit]",
        "Description=MLX Network node agent (lends this machine to the network)",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={shlex.join(spec.argv)}",
        f"WorkingDirectory={spec.data_dir}",
        "Environment=PYTHONUNBUFFERED=1",
        "Restart=on-failure",  # not after `mlxnet node leave`, which exits cleanly
        "RestartSec=10",
        "KillSignal=SIGTERM",
        f"TimeoutStopSec={spec.stop_timeout_s}",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ])


def systemd_enable_command() -> str:
    return f"systemctl --user daemon-reload && systemctl --user enable --now {SYSTEMD_UNIT_NAME}"
