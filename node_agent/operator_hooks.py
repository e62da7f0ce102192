"""The operator's terms wired into the agent: lending, hand-back, self-benchmark, pods, status.

See node_agent.hooks for when the agent calls each method. All state here is
touched from the agent's threads, so it sits behind one lock.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

from contracts.benchmarks import BenchmarkResult
from contracts.pods import PodDeclaration
from node_agent.coordinator_client import Assignment, Challenge, NodeStatus
from node_agent.hooks import AgentHooks, ChallengeRun
from node_agent.lending.monitor import LendingMonitor
from node_agent.pods.outcome import PodJobResult, PodJobRunner
from node_agent.status_file import StatusReport, read_status, write_status
from node_agent.token_sender import TokenSender

log = logging.getLogger(__name__)

BenchmarkRunner = Callable[[], BenchmarkResult]
# A challenge -> decoded on the reference model, with its receipt (benchmark.run_challenge).
ChallengeRunner = Callable[[Challenge], ChallengeRun]


class OperatorHooks(AgentHooks):
    def __init__(self, node_id: str, coordinator: str, monitor: LendingMonitor, status_path: Path,
                 benchmark: BenchmarkRunner | None = None, benchmark_interval_s: float = 6 * 3600,
                 pod: PodDeclaration | None = None, pod_runner: PodJobRunner | None = None,
                 challenge_runner: ChallengeRunner | None = None) -> None:
        self._node_id, self._coordinator = node_id, coordinator
        self.monitor = monitor
        self._status_path = status_path
        self._benchmark, self._benchmark_interval_s = benchmark, benchmark_interval_s
        self._pod, self._pod_runner = pod, pod_runner
        self._challenge_runner = challenge_runner
        self._lock = threading.Lock()
        self._no_job = threading.Condition(self._lock)
        self._latest_benchmark: BenchmarkResult | None = None
        self._unsent_benchmark: BenchmarkResult | None = None
        self._next_benchmark_at = 0.0  # monotonic seconds; 0 runs one as soon as the worker is idle
        self._current_job: str | None = None
        self._status_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="status-file")
        self.benchmark_ready: Callable[[], None] | None = None  # the agent heartbeats it out at once
        self._day, self._jobs, self._earned, self._unfinished = self._today_from_file()

    def _today_from_file(self) -> tuple[str, int, int, int]:
        today = date.today().isoformat()
        previous = read_status(self._status_path)
        if previous is None or previous.day != today:
            return today, 0, 0, 0
        return today, previous.jobs_today, previous.earned_today_base_units, previous.unfinished_today

    # --- what the coordinator hears ---------------------------------------------

    def status(self, warm_models: tuple[str, ...]) -> NodeStatus:
        with self._lock:
            benchmark, self._unsent_benchmark = self._unsent_benchmark, None
        self.write_status()
        return NodeStatus(lending=self.monitor.state, warm_models=warm_models, benchmark=benchmark)

    def pod(self) -> PodDeclaration | None:
        return self._pod

    # --- taking, keeping and handing back work -----------------------------------

    def refusal(self, assignment: Assignment) -> str | None:
        state = self.monitor.state
        return None if state.accepting_jobs else f"not taking work: {state.reason}"

    def keep_going(self, job_id: str) -> bool:
        return not self.monitor.must_hand_back()

    def hand_back_reason(self) -> str:
        bound = self.monitor.config.handback_after_s
        return f"{self.monitor.state.reason or 'stopped'}; not finished within {bound:.0f}s"

    def run_pod_job(self, assignment: Assignment, sender: TokenSender) -> PodJobResult:
        """Dispatch to the pod's runner, which stops the run once the owner's bound runs out."""
        if self._pod_runner is None:
            return PodJobResult(failure_reason="this node declares no pod it could lead")
        return self._pod_runner(assignment, sender, lambda: self.keep_going(assignment.job_id))

    # --- the self-benchmark ---------------------------------------------------------

    def idle_work(self) -> None:
        """Benchmark when due, and only while the owner's terms allow work (never in their way)."""
        if self._benchmark is None or time.monotonic() < self._next_benchmark_at:
            return
        if not self.monitor.state.accepting_jobs:
            return
        self._next_benchmark_at = time.monotonic() + self._benchmark_interval_s
        result = self._benchmark()
        with self._lock:
            self._latest_benchmark = self._unsent_benchmark = result
        self.write_status()
        if self.benchmark_ready is not None:
            self.benchmark_ready()

    def run_challenge(self, challenge: Challenge) -> ChallengeRun | None:
        if self._challenge_runner is None:
            return None
        return self._challenge_runner(challenge)

    @property
    def latest_benchmark(self) -> BenchmarkResult | None:
        with self._lock:
            return self._latest_benchmark

    # --- the operator's own record ------------------------------------------------

    def job_started(self, job_id: str) -> None:
        with self._lock:
            self._current_job = job_id
        # Off the MLX worker: the consumer is waiting for this job's first token. A write
        # reads the state when it runs, so a late one never undoes a newer one.
        self._status_writer.submit(self.write_status)

    def flush_status(self) -> None:
        """Wait until the status writes handed off so far are done."""
        self._status_writer.submit(lambda: None).result()

    def job_finished(self, job_id: str, credited_base_units: int | None) -> None:
        with self._lock:
            self._roll_day()
            if self._current_job == job_id:  # a receipt may come in after the next job started
                self._current_job = None
            if credited_base_units is None:
                self._unfinished += 1
            else:
                self._jobs += 1
                self._earned += credited_base_units
            self._no_job.notify_all()
        self.write_status()

    def wait_until_no_job(self, timeout_s: float) -> bool:
        """Block until no job runs here (or timeout); True when none does."""
        with self._no_job:
            return self._no_job.wait_for(lambda: self._current_job is None, timeout_s)

    def _roll_day(self) -> None:
        today = date.today().isoformat()
        if today != self._day:
            self._day, self._jobs, self._earned, self._unfinished = today, 0, 0, 0

    def write_status(self) -> None:
        state = self.monitor.state
        with self._lock:
            self._roll_day()
            benchmark = self._latest_benchmark
            report = StatusReport(
                node_id=self._node_id, coordinator=self._coordinator, mode=state.mode.value,
                accepting_jobs=state.accepting_jobs, owner_active=state.owner_active,
                reason=state.reason, current_job=self._current_job, day=self._day,
                jobs_today=self._jobs, earned_today_base_units=self._earned,
                unfinished_today=self._unfinished,
                benchmark=dataclasses.asdict(benchmark) if benchmark else None,
                updated_at_ms=time.time_ns() // 1_000_000, pid=os.getpid())
            try:
                write_status(self._status_path, report)
            except OSError as error:  # a full disk must not stop the node from working
                log.warning("cannot write %s: %s", self._status_path, error)
