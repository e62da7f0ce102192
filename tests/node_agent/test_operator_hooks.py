"""The operator's terms inside the agent: refusing, handing back, benchmarking, keeping the record."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from contracts.benchmarks import BenchmarkResult
from contracts.lending import LendingMode
from node_agent.coordinator_client import Assignment
from node_agent.hardware.discover import HostActivity
from node_agent.lending.config import LendingConfig
from node_agent.lending.monitor import LendingMonitor
from node_agent.operator_hooks import OperatorHooks
from node_agent.status_file import read_status

AWAY = HostActivity(3600.0, True, None)
BACK = HostActivity(1.0, True, None)
BENCH = BenchmarkResult(memory_bandwidth_gb_s=400.0, decode_tokens_per_s=300.0,
                        prefill_tokens_per_s=3000.0, reference_model="tiny",
                        reference_weights_bytes=12_000_000, measured_at_ms=1, run_time_ms=2000)


class Host:
    def __init__(self) -> None:
        self.activity, self.now_s = AWAY, 0.0


def _hooks(tmp_path: Path, host: Host, runs: list[int]) -> OperatorHooks:
    monitor = LendingMonitor(LendingConfig(mode=LendingMode.IDLE, handback_after_s=10.0),
                             lambda: host.activity, 8 << 30, None, lambda: host.now_s,
                             lambda: datetime(2026, 1, 5, 12))

    def benchmark() -> BenchmarkResult:
        runs.append(1)
        return BENCH
    return OperatorHooks("node-1", "c:1", monitor, tmp_path / "status.json", benchmark, 3600.0)


def _assignment() -> Assignment:
    from contracts.models import ModelSpec

    spec = ModelSpec(model_id="m", weights_bytes=1, parameter_count=1, num_layers=1,
                     num_attention_heads=1, num_kv_heads=1, head_dim=1, max_context_tokens=16,
                     weights_digest="00" * 32)
    return Assignment("job-1", spec, "p", 4, 0.0, 1.0, 0)


def test_work_is_refused_while_the_owner_is_back_and_handed_back_after_the_bound(tmp_path: Path) -> None:
    host, runs = Host(), []
    hooks = _hooks(tmp_path, host, runs)
    assert hooks.refusal(_assignment()) is None and hooks.keep_going("job-1")
    host.activity = BACK
    hooks.monitor.refresh()
    assert "using this Mac" in (hooks.refusal(_assignment()) or "")
    assert hooks.keep_going("job-1")  # within the bound the running job goes on
    host.now_s += 10.0
    assert not hooks.keep_going("job-1") and "within 10s" in hooks.hand_back_reason()


def test_the_benchmark_runs_when_due_and_only_while_lending_is_allowed(tmp_path: Path) -> None:
    host, runs = Host(), []
    hooks = _hooks(tmp_path, host, runs)
    host.activity = BACK
    hooks.monitor.refresh()
    hooks.idle_work()
    assert runs == []  # never in the owner's way
    host.activity = AWAY
    hooks.monitor.refresh()
    hooks.idle_work()
    hooks.idle_work()  # not due again for an hour
    assert runs == [1] and hooks.latest_benchmark == BENCH
    assert hooks.status(("m",)).benchmark == BENCH  # sent once...
    assert hooks.status(("m",)).benchmark is None  # ...then not again


def test_the_status_file_keeps_todays_jobs_and_earnings(tmp_path: Path) -> None:
    host, runs = Host(), []
    hooks = _hooks(tmp_path, host, runs)
    hooks.job_started("job-1")
    hooks.flush_status()  # written off the MLX worker's path
    assert read_status(tmp_path / "status.json").current_job == "job-1"  # type: ignore[union-attr]
    hooks.job_finished("job-1", 700)
    hooks.job_finished("job-2", None)
    status = read_status(tmp_path / "status.json")
    assert status is not None and status.current_job is None and status.jobs_today == 1
    assert status.earned_today_base_units == 700 and status.unfinished_today == 1
    assert hooks.wait_until_no_job(0.0)
    again = _hooks(tmp_path, host, runs)  # a restarted agent keeps today's tally
    again.write_status()
    assert read_status(tmp_path / "status.json").earned_today_base_units == 700  # type: ignore[union-attr]
