"""The agent's own account of itself, in a JSON file `mlxnet node status` reads.

Earnings are the credits the coordinator confirmed for each job, as the agent
logged them, so an operator can hold the network's statement against the
node's own record.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

STATUS_FILE_NAME = "status.json"
PID_FILE_NAME = "agent.pid"
BASE_UNITS_PER_MLX = 10**9


@dataclass(frozen=True)
class StatusReport:
    node_id: str
    coordinator: str
    mode: str
    accepting_jobs: bool
    owner_active: bool
    reason: str  # why not taking work, when not
    current_job: str | None
    day: str  # local date the tallies below belong to, YYYY-MM-DD
    jobs_today: int
    earned_today_base_units: int
    unfinished_today: int  # handed back or failed here, so not paid
    benchmark: dict[str, object] | None  # the latest self-benchmark, as sent
    updated_at_ms: int
    pid: int


def write_status(path: Path, report: StatusReport) -> None:
    """Atomically, so status never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(dataclasses.asdict(report), indent=2), encoding="utf-8")
    temporary.replace(path)


def read_status(path: Path) -> StatusReport | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return StatusReport(**data)
    except (FileNotFoundError, ValueError, TypeError):
        return None


def format_mlx(base_units: int) -> str:
    """Base units as MLX with all nine decimals, in integers (no float rounding)."""
    sign = "-" if base_units < 0 else ""
    whole, fraction = divmod(abs(base_units), BASE_UNITS_PER_MLX)
    return f"{sign}{whole}.{fraction:09d} MLX"


def write_pid(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}\n", encoding="utf-8")


def running_agent_pid(path: Path) -> int | None:
    """The pid in the pid file when that process is alive, else None."""
    try:
        pid = int(path.read_text(encoding="utf-8").strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    except PermissionError:
        return pid  # alive, owned by another user
    return pid
