"""The pod leader's side of a pod job: start every rank with mlx.launch, stream, check each rank.

The backend is jaccl (RDMA over Thunderbolt 5) when every cable is RDMA and
the config lists the RDMA devices, else ring (TCP). mlx.launch starts one
rank per member (over ssh; 127.0.0.1 runs locally) with
`python -m node_agent.inference.pod_rank RUN_DIR`. Rank 0 prints each decoding
step on stdout; tokens go to the coordinator as they come, one step late so
their text is final, exactly as a single Mac sends them.

mlx.launch exits 0 even when a rank fails, so the result is read from each
rank's RUN_DIR/rank-<r>.json: a missing or failed rank (a member died) hands
the job back so the coordinator places it again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from contracts.hardware import LinkKind
from contracts.ids import NodeId
from contracts.pods import PodCable, PodDeclaration
from contracts.receipts import FinishReason
from node_agent.coordinator_client import Assignment
from node_agent.inference.engine import GenerationResult
from node_agent.lending.config import PodConfig
from node_agent.pods.outcome import PodJobResult
from node_agent.token_sender import TokenSender

log = logging.getLogger(__name__)

STEP_PREFIX = "MLXNET-STEP "  # node_agent.inference.pod_rank prints these
PROMPT_PREFIX = "MLXNET-PROMPT "
RUN_TIMEOUT_S = 3600.0
EXIT_WAIT_S = 30.0
WATCH_INTERVAL_S = 0.5
RUNS_KEPT_MAX = 16


def pod_declaration(config: PodConfig, leader: str) -> PodDeclaration:
    assert config.members[0] == leader, "the pod's first member is the node that leads it"
    return PodDeclaration(
        pod_id=config.pod_id, leader=NodeId(leader), members=tuple(NodeId(m) for m in config.members),
        cables=tuple(PodCable(NodeId(link.a), NodeId(link.b), link.kind, link.cables)
                     for link in config.links))


def choose_backend(config: PodConfig) -> str:
    if config.backend != "auto":
        return config.backend
    all_rdma = all(link.kind is LinkKind.RDMA_TB5 for link in config.links)
    return "jaccl" if all_rdma and config.rdma_devices else "ring"


def hostfile(config: PodConfig, backend: str) -> dict[str, object]:
    """mlx.launch's hostfile: how to reach each member (ssh), its IPs (ring) and RDMA devices (jaccl)."""
    hosts = []
    for index, (host, ip) in enumerate(zip(config.hosts, config.ips)):
        entry: dict[str, object] = {"ssh": host, "ips": [ip] if ip else []}
        if backend == "jaccl":
            entry["rdma"] = list(config.rdma_devices[index])
        hosts.append(entry)
    return {"backend": backend, "hosts": hosts}


def free_port_run(count: int) -> int:
    """A first port such that the next `count` ports on loopback look free (ring uses one per rank)."""
    for _ in range(64):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count >= 65535:
            continue
        if all(_port_free(port) for port in range(first, first + count)):
            return first
    raise OSError("no run of free ports on 127.0.0.1 for the ring backend")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def launcher() -> str:
    """The mlx.launch script of this interpreter's environment."""
    beside = Path(sys.executable).parent / "mlx.launch"
    found = str(beside) if beside.exists() else shutil.which("mlx.launch")
    if found is None:
        raise OSError("mlx.launch not found; install mlx in this environment")
    return found


@dataclass(frozen=True)
class PodRun:
    config: PodConfig
    model_dirs: dict[str, Path]
    runs_dir: Path
    python: str = sys.executable
    timeout_s: float = RUN_TIMEOUT_S

    def __call__(self, assignment: Assignment, sender: TokenSender,
                 keep_going: Callable[[], bool]) -> PodJobResult:
        if tuple(assignment.pod_node_ids) != self.config.members:
            return PodJobResult(handed_back_reason=f"the coordinator's pod members "
                                f"{list(assignment.pod_node_ids)} differ from this node's [pod] "
                                "config; register again with the current config")
        backend = choose_backend(self.config)
        run_dir = self._prepare(assignment, backend)
        argv = [launcher(), "--hostfile", str(run_dir / "hostfile.json"), "--backend", backend,
                "--starting-port", str(free_port_run(len(self.config.members))),
                "--python", self.python, "--cwd", str(run_dir), "--",
                "-m", "node_agent.inference.pod_rank", str(run_dir)]
        log.info("pod job %s: %s over %s on %d members", assignment.job_id, assignment.strategy,
                 backend, len(self.config.members))
        with (run_dir / "launch.log").open("ab") as launch_log:
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=launch_log,
                                       stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        stopped = threading.Event()
        watchdog = threading.Thread(target=self._watch, args=(process, keep_going, stopped),
                                    daemon=True, name=f"pod-watch-{assignment.job_id}")
        watchdog.start()
        try:
            streamed = _stream_steps(process, sender, keep_going)
            try:
                process.wait(EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                _kill(process)
                process.wait(EXIT_WAIT_S)
        finally:
            stopped.set()
            assert process.stdout is not None
            process.stdout.close()
        return self._outcome(assignment, run_dir, streamed, keep_going)

    def _prepare(self, assignment: Assignment, backend: str) -> Path:
        run_dir = self.runs_dir / assignment.job_id
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        _prune(self.runs_dir)
        request = dict(
            job_id=assignment.job_id, backend=backend, ranks=len(self.config.members),
            strategy=assignment.strategy,
            layer_split=list(assignment.layer_split) if assignment.strategy == "pipeline" else [],
            model_dir=str(self.model_dirs[assignment.model.model_id]), prompt=assignment.prompt,
            max_tokens=assignment.max_tokens, temperature=assignment.temperature,
            top_p=assignment.top_p, seed=assignment.seed,
            max_context_tokens=assignment.model.max_context_tokens)
        (run_dir / "request.json").write_text(json.dumps(request), encoding="utf-8")
        (run_dir / "hostfile.json").write_text(json.dumps(hostfile(self.config, backend)), encoding="utf-8")
        return run_dir

    def _watch(self, process: subprocess.Popen, keep_going: Callable[[], bool],
               stopped: threading.Event) -> None:
        """Kill the pod when the owner's bound runs out or the run overstays its timeout."""
        deadline = time.monotonic() + self.timeout_s
        while not stopped.wait(WATCH_INTERVAL_S) and process.poll() is None:
            if not keep_going() or time.monotonic() > deadline:
                log.warning("stopping pod run (hand-back bound or timeout reached)")
                _kill(process)
                return

    def _outcome(self, assignment: Assignment, run_dir: Path, streamed: "_Streamed",
                 keep_going: Callable[[], bool]) -> PodJobResult:
        if not keep_going():
            return PodJobResult(handed_back_reason="the pod stopped: the owner's hand-back bound ran out")
        if streamed.stopped_by_sender:  # the coordinator refused more tokens (cancelled)
            return PodJobResult()
        results = [_rank_result(run_dir, rank) for rank in range(len(self.config.members))]
        for rank, result in enumerate(results):
            if result.get("prompt_too_long"):
                return PodJobResult(failure_reason=str(result["error"]), prompt_too_long=True)
            if not result.get("ok"):
                host = self.config.hosts[rank]
                return PodJobResult(handed_back_reason=f"pod rank {rank} on {host} failed: "
                                    f"{result.get('error', 'it wrote no result (it died)')}")
        for rank, result in enumerate(results):
            if tuple(result["token_ids"]) != streamed.token_ids:  # type: ignore[arg-type]
                return PodJobResult(handed_back_reason=f"pod rank {rank} decoded other tokens "
                                    "than rank 0 streamed; the ranks disagree")
        first = results[0]
        return PodJobResult(result=GenerationResult(
            token_ids=streamed.token_ids, text=str(first["text"]),
            prompt_tokens=int(first["prompt_tokens"]),  # type: ignore[call-overload]
            started_at_ms=int(first["started_at_ms"]),  # type: ignore[call-overload]
            finished_at_ms=int(first["finished_at_ms"]),  # type: ignore[call-overload]
            stopped_early=False, finish_reason=FinishReason(int(first["finish_reason"])),  # type: ignore[call-overload]
            first_token_at_ms=int(first["first_token_at_ms"]),  # type: ignore[call-overload]
            activation_commitment=bytes.fromhex(str(first["activation_commitment"]))))


@dataclass(frozen=True)
class _Streamed:
    token_ids: tuple[int, ...]
    stopped_by_sender: bool


def _stream_steps(process: subprocess.Popen, sender: TokenSender,
                  keep_going: Callable[[], bool]) -> _Streamed:
    """Rank 0's tokens to the coordinator as they come (already one step late, as Engine hands them)."""
    assert process.stdout is not None
    token_ids: list[int] = []
    stopped = False
    for line in process.stdout:
        if stopped:
            continue
        if line.startswith(PROMPT_PREFIX):
            sender.note_prompt_tokens(int(line[len(PROMPT_PREFIX):]))
        elif line.startswith(STEP_PREFIX):
            step = json.loads(line[len(STEP_PREFIX):])
            if not (sender.offer(int(step["index"]), int(step["token"]), step["text"]) and keep_going()):
                stopped = True
                _kill(process)
                continue
            token_ids.append(int(step["token"]))
    return _Streamed(tuple(token_ids), stopped)


def _rank_result(run_dir: Path, rank: int) -> dict[str, object]:
    try:
        return json.loads((run_dir / f"rank-{rank}.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {"ok": False, "error": "it wrote no result (the member died or was cut off)"}


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _prune(runs_dir: Path) -> None:
    """Keep the newest runs' logs only."""
    runs = sorted((p for p in runs_dir.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for old in runs[:-RUNS_KEPT_MAX]:
        shutil.rmtree(old, ignore_errors=True)


def pod_job_runner(config: PodConfig, model_dirs: dict[str, Path], runs_dir: Path) -> PodRun:
    return PodRun(config, model_dirs, runs_dir)
