"""The cross-coordinator penalty: a consumer on coordinator A, its node on coordinator B.

    .venv/bin/python -m bench.scale_cross [--jobs 40] [--tokens 20] [--chunk-interval-ms 25]

Issue 27's target: TTFT p50 within 10 ms of a consumer on B itself, and the same largest
gap between chunks. Two coordinator processes (TLS, each its own certificate) share a fresh
PostgreSQL database on the shared server; one simulated node on B speaks the real protocol
(signed registration, the assignment stream, streamed tokens, a signed receipt) and streams
--tokens tokens, one chunk every --chunk-interval-ms. A consumer submits and streams jobs
one at a time, alternating between A (across) and B (the same coordinator), in one run.

Prints, per path: TTFT p50/p90 (submit to first token at the consumer), the largest gap
between chunks (p50 and max over jobs), and A's and B's CPU ms per job; then the bus lag
A measured (`mlxnet:event_bus_lag_seconds`), and the CPU time of the whole run, since wall
figures on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos import SharedPostgres
from bench.process_cpu import cpu_seconds
from contracts.commitments import (
    TOP_K, ActivationCommitment, ChunkCommitment, encode_commitment, generated_chunk_count,
)
from contracts.hardware import ChipTier, HardwareReport
from contracts.ids import JobId
from contracts.models import ModelSpec
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from mlxnet.consumer import JobClient, StreamedTokens
from mlxnet.processes import Child, operator_key, start_coordinator
from node_agent.coordinator_client import (
    Assignment, Chunk, CoordinatorCallError, CoordinatorClient, NodeStatus,
)
from node_agent.identity import Identity, load_or_create_identity

log = logging.getLogger("bench.scale_cross")
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MODEL = ModelSpec(model_id="bench/model", weights_bytes=10_000_000, parameter_count=2_500_000,
                  num_layers=4, num_attention_heads=4, num_kv_heads=2, head_dim=32,
                  max_context_tokens=2048, weights_digest="ab" * 32, vocab_size=256)
HARDWARE = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO,
                          memory_bytes=64 << 30, gpu_working_set_bytes=48 << 30, gpu_cores=20,
                          memory_bandwidth_gb_s=273.0, os_name="macOS (simulated)", simulated=True)
WARM_UP_JOBS = 4
PROMPT = "Hello there"


@dataclass
class PathFigures:
    name: str
    ttft_ms: list[float] = field(default_factory=list)
    largest_gap_ms: list[float] = field(default_factory=list)
    cpu_a_s: float = 0.0
    cpu_b_s: float = 0.0


def _commitment(tokens: int) -> bytes:
    """Of the right shape; its values prove nothing (the bench's node runs no model)."""
    blank = ChunkCommitment(0, (0,) * TOP_K)
    return encode_commitment(ActivationCommitment(blank, (blank,) * generated_chunk_count(tokens)))


class SimulatedNode:
    """On B: answers each assignment with tokens at a fixed pace, then a signed receipt."""

    def __init__(self, client: CoordinatorClient, identity: Identity, interval_s: float) -> None:
        self._client, self._identity, self._interval_s = client, identity, interval_s

    def serve(self, stopping: threading.Event) -> None:
        try:
            for assignment in self._client.assignments():
                threading.Thread(target=self._run, args=(assignment,), daemon=True).start()
        except CoordinatorCallError:
            if not stopping.is_set():  # at the end the bench closes the stream itself
                raise

    def beat(self, interval_s: float, stopping: threading.Event) -> None:
        """Signed heartbeats, as an agent sends them: without them the node counts as offline."""
        while not stopping.wait(interval_s):
            try:
                self._client.heartbeat(0, NodeStatus())
            except CoordinatorCallError:
                log.exception("the simulated node's heartbeat failed")

    def _chunks(self, tokens: tuple[int, ...]) -> Iterator[Chunk]:
        for index, token in enumerate(tokens):
            if index:
                time.sleep(self._interval_s)
            yield Chunk(index, (token,), "x", prompt_tokens=3 if index == 0 else 0)

    def _run(self, assignment: Assignment) -> None:
        try:
            self._answer(assignment)
        except CoordinatorCallError:
            log.exception("the simulated node could not finish job %s", assignment.job_id)

    def _answer(self, assignment: Assignment) -> None:
        tokens = tuple(range(10, 10 + assignment.max_tokens - 1))
        started_ms = time.time_ns() // 1_000_000
        self._client.stream_tokens(assignment.job_id, self._chunks(tokens))
        now_ms = time.time_ns() // 1_000_000
        body = encode_receipt(Receipt(
            job_id=JobId(assignment.job_id), node_id=self._identity.node_id,
            model_id=MODEL.model_id, weights_digest=MODEL.weights_digest,
            prompt_digest=prompt_digest(assignment.prompt), temperature=assignment.temperature,
            top_p=assignment.top_p, seed=assignment.seed, max_tokens=assignment.max_tokens,
            output_digest=output_digest(tokens), prompt_tokens=3, completion_tokens=len(tokens),
            started_at_ms=started_ms, finished_at_ms=now_ms, finish_reason=FinishReason.END_TOKEN,
            first_token_at_ms=started_ms, activation_commitment=_commitment(len(tokens))))
        self._client.report_receipt(assignment.job_id, body, self._identity.sign(body))


def _one_job(client: JobClient, tokens: int) -> tuple[float, float]:
    """(TTFT ms, largest gap between chunks ms) of one job, as its consumer sees them."""
    started = time.perf_counter()
    job = client.submit(MODEL.model_id, PROMPT, max_tokens=tokens + 1)
    arrivals = []
    for item in client.stream(job.job_id):
        if isinstance(item, StreamedTokens) and item.token_ids:
            arrivals.append(time.perf_counter())
    assert len(arrivals) >= 1, f"job {job.job_id} streamed nothing"
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)] or [0.0]
    return 1000 * (arrivals[0] - started), 1000 * max(gaps)


def _lag(exposition: str) -> tuple[float, float]:
    """(count, mean ms) of the event-bus lag histogram."""
    values = {line.split()[0]: float(line.split()[1]) for line in exposition.splitlines()
              if line.startswith("mlxnet:event_bus_lag_seconds_")}
    count = values.get("mlxnet:event_bus_lag_seconds_count", 0.0)
    total = values.get("mlxnet:event_bus_lag_seconds_sum", 0.0)
    return count, (1000 * total / count if count else 0.0)


def _metrics(child: Child) -> str:
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=child.extra["certificate"])
    with urllib.request.urlopen(f"{child.extra['url']}/metrics", context=context, timeout=10) as r:
        return r.read().decode()


def run(jobs: int, tokens: int, interval_s: float, work: Path) -> None:
    postgres = SharedPostgres(POSTGRES_URL)
    children: list[Child] = []
    stopping = threading.Event()
    try:
        a = start_coordinator(work / "a", database_url=postgres.url, allow_anonymous=True)
        children.append(a)
        b = start_coordinator(work / "b", database_url=postgres.url, allow_anonymous=True)
        children.append(b)
        identity = load_or_create_identity(work / "node" / "identity.pem")
        node = CoordinatorClient(b.extra["address"], b.trust)
        interval_ms = node.register(identity, HARDWARE, (MODEL,), "bench", "bench-node", 64,
                                    operator_key=operator_key(b.extra["address"], "bench") or "")
        simulated = SimulatedNode(node, identity, interval_s)
        threading.Thread(target=simulated.serve, args=(stopping,), daemon=True).start()
        threading.Thread(target=simulated.beat, args=(interval_ms / 1000, stopping),
                         daemon=True).start()
        clients = {"across (consumer on A, node on B)": JobClient(a.extra["address"], "bench", trust=a.trust),
                   "same (consumer on B, node on B)": JobClient(b.extra["address"], "bench", trust=b.trust)}
        figures = {name: PathFigures(name) for name in clients}
        for name, client in clients.items():
            for _ in range(WARM_UP_JOBS):
                _one_job(client, tokens)
        lag_before = _lag(_metrics(a))
        bench_cpu_before, wall_before = time.process_time(), time.perf_counter()
        total_a, total_b = cpu_seconds(a.process.pid), cpu_seconds(b.process.pid)
        for number in range(jobs):
            name = list(clients)[number % 2]
            cpu_a, cpu_b = cpu_seconds(a.process.pid), cpu_seconds(b.process.pid)
            ttft_ms, gap_ms = _one_job(clients[name], tokens)
            figure = figures[name]
            figure.ttft_ms.append(ttft_ms)
            figure.largest_gap_ms.append(gap_ms)
            figure.cpu_a_s += cpu_seconds(a.process.pid) - cpu_a
            figure.cpu_b_s += cpu_seconds(b.process.pid) - cpu_b
        wall_s = time.perf_counter() - wall_before
        bench_cpu_s = time.process_time() - bench_cpu_before
        total_a = cpu_seconds(a.process.pid) - total_a
        total_b = cpu_seconds(b.process.pid) - total_b
        lag_after = _lag(_metrics(a))
        _print(figures, tokens, interval_s, wall_s, total_a, total_b, bench_cpu_s, lag_before, lag_after)
        stopping.set()
        for client in clients.values():
            client.close()
        node.close()
    finally:
        stopping.set()
        for child in children:
            with contextlib.suppress(Exception):
                child.stop()
        postgres.stop()


def _print(figures: dict[str, PathFigures], tokens: int, interval_s: float, wall_s: float,
           cpu_a_s: float, cpu_b_s: float, bench_cpu_s: float, lag_before: tuple[float, float],
           lag_after: tuple[float, float]) -> None:
    print(f"{tokens} tokens per job, one chunk every {1000 * interval_s:.0f} ms, jobs one at a "
          "time, paths alternated")
    print(f"{'path':<36} {'jobs':>4} {'TTFT p50':>9} {'p90':>7} {'gap p50':>8} {'gap max':>8} "
          f"{'A cpu/job':>10} {'B cpu/job':>10}")
    p50 = {}
    for figure in figures.values():
        count = len(figure.ttft_ms)
        ttft = sorted(figure.ttft_ms)
        p50[figure.name] = statistics.median(ttft)
        print(f"{figure.name:<36} {count:>4} {statistics.median(ttft):>7.1f}ms "
              f"{ttft[int(0.9 * (count - 1))]:>5.1f}ms {statistics.median(figure.largest_gap_ms):>6.1f}ms "
              f"{max(figure.largest_gap_ms):>6.1f}ms {1000 * figure.cpu_a_s / count:>8.1f}ms "
              f"{1000 * figure.cpu_b_s / count:>8.1f}ms")
    across, same = p50.values()
    print(f"cross-coordinator TTFT penalty (p50): {across - same:+.1f} ms (target <= 10 ms)")
    count = lag_after[0] - lag_before[0]
    print(f"event bus lag at A over the run: {count:.0f} notifications, mean "
          f"{lag_after[1]:.2f} ms since start")
    print(f"CPU over the run ({wall_s:.1f} s wall): coordinator A {cpu_a_s:.2f} s, "
          f"coordinator B {cpu_b_s:.2f} s, bench (consumer and node) {bench_cpu_s:.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=40, help="measured jobs, half on each path")
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--chunk-interval-ms", type=float, default=25.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="scale-cross-") as work:
        run(args.jobs, args.tokens, args.chunk_interval_ms / 1000, Path(work))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
