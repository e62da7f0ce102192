"""Heartbeat latency for an honest node while a hostile client holds many streams open.

    .venv/bin/python -m bench.held_streams [--streams 1280] [--heartbeats 300]

Issue 25: holding 140 StreamJob or ReceiveAssignments streams stalled the old threaded
server (128 workers); the target is a heartbeat p99 within 2x of the quiet figure while a
hostile client holds 10x that worker count. Starts a coordinator process (SQLite, TLS),
registers an honest simulated node and times its heartbeats, quiet and then while the
hostile client (the same machine) holds --streams ReceiveAssignments streams over as many
registered sessions as the per-session limit needs. Prints p50/p99 of each phase and the
coordinator's CPU time over it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.process_cpu import cpu_seconds
from contracts.hardware import ChipTier, HardwareReport
from contracts.models import ModelSpec
from coordinator.rpc.stream_limits import StreamLimits
from mlxnet.processes import start_coordinator
from node_agent.coordinator_client import CoordinatorClient
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import node_pb2, node_pb2_grpc
from protos.wire.channel import open_channel

MODEL = ModelSpec(model_id="bench/model", weights_bytes=10_000_000, parameter_count=2_500_000,
                  num_layers=4, num_attention_heads=4, num_kv_heads=2, head_dim=32,
                  max_context_tokens=2048, weights_digest="ab" * 32)
HARDWARE = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO,
                          memory_bytes=64 << 30, gpu_working_set_bytes=48 << 30, gpu_cores=20,
                          memory_bandwidth_gb_s=273.0, os_name="macOS (simulated)", simulated=True)
HEARTBEAT_PAUSE_S = 0.02  # between an honest node's heartbeats (a real one sends one every 2 s)
SETTLE_S = 3.0  # after opening the streams, before timing: each has read the database once


def _register(work: Path, address: str, trust, name: str) -> CoordinatorClient:  # type: ignore[no-untyped-def]
    client = CoordinatorClient(address, trust)
    client.register(load_or_create_identity(work / name / "identity.pem"), HARDWARE, (MODEL,),
                    "bench", name, 1)
    return client


def _heartbeats(client: CoordinatorClient, count: int, pid: int) -> tuple[list[float], float, float]:
    """(latencies in ms, coordinator CPU s, wall s) over count heartbeats."""
    latencies = []
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    for _ in range(count):
        sent = time.perf_counter()
        client.heartbeat(0)
        latencies.append(1000 * (time.perf_counter() - sent))
        time.sleep(HEARTBEAT_PAUSE_S)
    return latencies, cpu_seconds(pid) - cpu_before, time.perf_counter() - started


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _line(label: str, latencies: list[float], cpu_s: float, wall_s: float) -> str:
    return (f"  {label:<28} heartbeat p50 {statistics.median(latencies):6.2f} ms, "
            f"p99 {_p99(latencies):6.2f} ms; {1000 * cpu_s / len(latencies):5.2f} ms coordinator CPU "
            "per heartbeat; "
            f"coordinator CPU {cpu_s:6.2f} s over {wall_s:5.1f} s ({100 * cpu_s / wall_s:5.1f}% of a core)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1280, help="held streams (10x the old 128 workers)")
    parser.add_argument("--heartbeats", type=int, default=300, help="timed heartbeats per phase")
    args = parser.parse_args(argv)
    per_session = StreamLimits().assignment_streams_per_node
    out = sys.stdout
    with tempfile.TemporaryDirectory(prefix="mlxnet-bench-streams-") as tmp:
        work = Path(tmp)
        coordinator = start_coordinator(work, database_url=f"sqlite:///{work / 'c.db'}")
        pid, address, trust = coordinator.process.pid, coordinator.extra["address"], coordinator.trust
        try:
            honest = _register(work, address, trust, "honest")
            quiet = _heartbeats(honest, args.heartbeats, pid)
            started = time.perf_counter()
            hostile = [_register(work, address, trust, f"hostile-{n}")
                       for n in range(-(-args.streams // per_session))]
            channel, _ = open_channel(address, trust)
            stub = node_pb2_grpc.NodeServiceStub(channel)
            held = [stub.ReceiveAssignments(node_pb2.ReceiveAssignmentsRequest(),
                                            metadata=(("x-mlxnet-session", client.session_token),))
                    for client in hostile for _ in range(per_session)][:args.streams]
            opened_s = time.perf_counter() - started
            time.sleep(SETTLE_S)
            alive = sum(1 for call in held if not call.done())
            ended = Counter(call.code().name for call in held if call.done())
            loaded = _heartbeats(honest, args.heartbeats, pid)
            for call in held:
                call.cancel()
            channel.close()
        finally:
            coordinator.stop()
    out.write(f"honest node's heartbeats over TLS, {args.heartbeats} per phase, one every "
              f"{1000 * HEARTBEAT_PAUSE_S:.0f} ms:\n")
    out.write(_line("quiet", *quiet) + "\n")
    out.write(_line(f"{alive} streams held", *loaded) + "\n")
    out.write(f"  (registering {len(hostile)} hostile sessions and opening the streams took {opened_s:.1f} s"
              + (f"; ended early: {dict(ended)}" if ended else "") + ")\n")
    ratio = _p99(loaded[0]) / _p99(quiet[0])
    out.write(f"p99 held / quiet: {ratio:.2f}x (target <= 2x)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
