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
A measured (`mlxnet:event_bus_lag_seconds`), the CPU time of the whole run, since wall
figures on a shared machine are noisy, and where the first token's time goes on each path:
each hop's median ms from the submit (contracts.hop_trace, one monotonic clock for every
process here).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos import SharedPostgres
from bench.process_cpu import cpu_seconds
from contracts import hop_trace
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
                hop_trace.job_hop(assignment.job_id, "node: assignment received")
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

    def _chunks(self, job_id: str, tokens: tuple[int, ...]) -> Iterator[Chunk]:
        for index, token in enumerate(tokens):
            if index:
                time.sleep(self._interval_s)
            else:
                hop_trace.job_hop(job_id, "node: first chunk to gRPC")
            yield Chunk(index, (token,), "x", prompt_tokens=3 if index == 0 else 0)

    def _run(self, assignment: Assignment) -> None:
        try:
            self._answer(assignment)
        except CoordinatorCallError:
            log.exception("the simulated node could not finish job %s", assignment.job_id)

    def _answer(self, assignment: Assignment) -> None:
        tokens = tuple(range(10, 10 + assignment.max_tokens - 1))
        started_ms = time.time_ns() // 1_000_000
        self._client.stream_tokens(assignment.job_id, self._chunks(assignment.job_id, tokens))
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


def _one_job(client: JobClient, tokens: int, path: str = "") -> tuple[float, float]:
    """(TTFT ms, largest gap between chunks ms) of one job, as its consumer sees them."""
    started, started_ns = time.perf_counter(), time.monotonic_ns()
    job = client.submit(MODEL.model_id, PROMPT, max_tokens=tokens + 1)
    hop_trace.job_hop(job.job_id, f"consumer: submit sent ({path})" if path else "warm-up", started_ns)
    hop_trace.job_hop(job.job_id, "consumer: submit answered")
    arrivals = []
    for item in client.stream(job.job_id):
        if isinstance(item, StreamedTokens) and item.token_ids:
            if not arrivals:
                hop_trace.job_hop(job.job_id, "consumer: first token")
            arrivals.append(time.perf_counter())
    assert len(arrivals) >= 1, f"job {job.job_id} streamed nothing"
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)] or [0.0]
    return 1000 * (arrivals[0] - started), 1000 * max(gaps)


def _lag_buckets(exposition: str) -> dict[float, float]:
    """The event-bus lag histogram's cumulative counts by upper bound (seconds)."""
    buckets = {}
    for line in exposition.splitlines():
        if line.startswith("mlxnet:event_bus_lag_seconds_bucket"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float(bound)] = float(line.split()[-1])
    return buckets


def _lag_quantiles(before: dict[float, float], after: dict[float, float]) -> tuple[float, str, str]:
    """(notifications, p50 bound, p99 bound) of the lag over the run, from the bucket counts."""
    counts = sorted((bound, after[bound] - before.get(bound, 0.0)) for bound in after)
    total = counts[-1][1] if counts else 0.0

    def bound_of(quantile: float) -> str:
        for bound, count in counts:
            if total and count >= quantile * total:
                return "> 10 s" if bound == float("inf") else f"<= {1000 * bound:g} ms"
        return "n/a"
    return total, bound_of(0.5), bound_of(0.99)


def _metrics(child: Child) -> str:
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=child.extra["certificate"])
    with urllib.request.urlopen(f"{child.extra['url']}/metrics", context=context, timeout=10) as r:
        return r.read().decode()


def _print_hops(trace: Path) -> None:
    """Each hop's median ms from the consumer's submit, per path."""
    by_path: dict[str, dict[str, list[float]]] = {}
    order: dict[str, int] = {}
    for hops in hop_trace.read(str(trace)).values():
        start = next(((ns, name) for ns, name in hops if name.startswith("consumer: submit sent")), None)
        if start is None:
            continue
        path = start[1].split("(")[1].rstrip(")")
        for position, (ns, name) in enumerate(hops):
            by_path.setdefault(path, {}).setdefault(name, []).append((ns - start[0]) / 1e6)
            order[name] = min(order.get(name, position), position)
    paths = sorted(by_path)
    print("first token, hop by hop (median ms from the submit):")
    print(f"{'hop':<36}" + "".join(f"{path:>10}" for path in paths))
    for name in sorted(order, key=lambda n: statistics.median(by_path[paths[0]].get(n, [0.0]))):
        if name.startswith("consumer: submit sent"):
            continue
        print(f"{name:<36}" + "".join(
            f"{statistics.median(by_path[path][name]):>8.1f}ms" if name in by_path[path] else f"{'-':>10}"
            for path in paths))


def run(jobs: int, tokens: int, interval_s: float, work: Path) -> None:
    trace = work / "hops.txt"
    os.environ[hop_trace.ENVIRONMENT_VARIABLE] = str(trace)  # the coordinators inherit it
    hop_trace.open_from_environment()
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
        lag_before = _lag_buckets(_metrics(a))
        bench_cpu_before, wall_before = time.process_time(), time.perf_counter()
        total_a, total_b = cpu_seconds(a.process.pid), cpu_seconds(b.process.pid)
        for number in range(jobs):
            name = list(clients)[number % 2]
            cpu_a, cpu_b = cpu_seconds(a.process.pid), cpu_seconds(b.process.pid)
            ttft_ms, gap_ms = _one_job(clients[name], tokens, name.split()[0])
            figure = figures[name]
            figure.ttft_ms.append(ttft_ms)
            figure.largest_gap_ms.append(gap_ms)
            figure.cpu_a_s += cpu_seconds(a.process.pid) - cpu_a
            figure.cpu_b_s += cpu_seconds(b.process.pid) - cpu_b
        wall_s = time.perf_counter() - wall_before
        bench_cpu_s = time.process_time() - bench_cpu_before
        total_a = cpu_seconds(a.process.pid) - total_a
        total_b = cpu_seconds(b.process.pid) - total_b
        lag_after = _lag_buckets(_metrics(a))
        _print(figures, tokens, interval_s, wall_s, total_a, total_b, bench_cpu_s, lag_before, lag_after)
        _print_hops(trace)
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
           cpu_a_s: float, cpu_b_s: float, bench_cpu_s: float, lag_before: dict[float, float],
           lag_after: dict[float, float]) -> None:
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
    count, p50_bound, p99_bound = _lag_quantiles(lag_before, lag_after)
    print(f"event bus lag at A over the run ({count:.0f} notifications from B): p50 {p50_bound}, "
          f"p99 {p99_bound}")
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
