"""Heartbeat latency for an honest node while a hostile client holds many streams open.

    .venv/bin/python -m bench.held_streams [--streams 1280] [--heartbeats 300]

Issue 25: holding 140 StreamJob or ReceiveAssignments streams stalled the old threaded
server (128 workers); the target is a heartbeat p99 within 2x of the quiet figure while a
hostile client holds 10x that worker count. Starts a coordinator process (SQLite, TLS),
registers an honest simulated node and times its heartbeats in three phases: quiet; with
the hostile client's sessions registered (as many as the per-session stream limit needs) but
no streams; and while the hostile client (the same machine) holds --streams
ReceiveAssignments streams over them. Timing starts once the coordinator reports every
stream open (its mlxnet:streams_open gauge). Prints p50/p99 of each phase, the coordinator's
CPU time over it, its CPU while the streams are only held, and the ratios within this run
(the machine is shared, so the ratio is the figure to compare across runs).
"""

from __future__ import annotations

import argparse
import logging
import re
import ssl
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.process_cpu import cpu_seconds
from contracts.hardware import ChipTier, HardwareReport
from contracts.models import ModelSpec
from coordinator.rpc.stream_limits import StreamLimits
from mlxnet.processes import start_coordinator
from node_agent.coordinator_client import CoordinatorClient, bind_session
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import node_pb2, node_pb2_grpc
from protos.wire.channel import open_channel

MODEL = ModelSpec(model_id="bench/model", weights_bytes=10_000_000, parameter_count=2_500_000,
                  num_layers=4, num_attention_heads=4, num_kv_heads=2, head_dim=32,
                  max_context_tokens=2048, weights_digest="ab" * 32, vocab_size=256)
HARDWARE = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO,
                          memory_bytes=64 << 30, gpu_working_set_bytes=48 << 30, gpu_cores=20,
                          memory_bandwidth_gb_s=273.0, os_name="macOS (simulated)", simulated=True)
HEARTBEAT_PAUSE_S = 0.02  # between an honest node's heartbeats (a real one sends one every 2 s)
OPEN_TIMEOUT_S = 120.0  # for the coordinator to report every held stream open
IDLE_S = 2.0  # the coordinator's CPU is read over this long while the streams are only held
# The bench registers hundreds of sessions from one address; the Sybil limits have their own tests.
UNLIMITED_REGISTRATIONS = ("--registrations-per-address-burst", "1000000",
                           "--registrations-per-address-per-minute", "1000000")
log = logging.getLogger("bench.held_streams")
STREAMS_OPEN = re.compile(r'^mlxnet:streams_open\{kind="node_assignments"\} (\S+)$', re.MULTILINE)


def _register(work: Path, address: str, trust, name: str) -> CoordinatorClient:  # type: ignore[no-untyped-def]
    client = CoordinatorClient(address, trust)
    client.register(load_or_create_identity(work / name / "identity.pem"), HARDWARE, (MODEL,),
                    "", name, 1)  # each its own operator: no key, and no operator's registration limit
    return client


def _wait_for_streams(metrics_url: str, certificate: str, calls: list) -> None:  # type: ignore[type-arg]
    """Until the coordinator's gauge shows every call's assignment stream open (each has begun
    its first step), or the call ended (refused)."""
    context = ssl.create_default_context(cafile=certificate)
    context.check_hostname = False
    deadline = time.monotonic() + OPEN_TIMEOUT_S
    shown, count = 0.0, len(calls)
    with httpx.Client(verify=context, timeout=30) as http:
        while time.monotonic() < deadline:
            found = STREAMS_OPEN.search(http.get(metrics_url).text)
            shown = float(found.group(1)) if found else 0.0
            count = len(calls) - sum(1 for call in calls if call.done())
            if shown >= count:
                return
            time.sleep(0.5)  # a scrape costs the coordinator a few ms: not too often
    raise TimeoutError(f"the coordinator reported {shown:.0f} of {count} streams open after "
                       f"{OPEN_TIMEOUT_S:.0f} s")


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
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    log.setLevel(logging.INFO)  # the phases, on stderr
    per_session = StreamLimits().assignment_streams_per_node
    out = sys.stdout
    with tempfile.TemporaryDirectory(prefix="mlxnet-bench-streams-") as tmp:
        work = Path(tmp)
        coordinator = start_coordinator(work, database_url=f"sqlite:///{work / 'c.db'}",
                                        extra_args=UNLIMITED_REGISTRATIONS)
        pid, address, trust = coordinator.process.pid, coordinator.extra["address"], coordinator.trust
        try:
            honest = _register(work, address, trust, "honest")
            quiet = _heartbeats(honest, args.heartbeats, pid)
            started = time.perf_counter()
            hostile = [_register(work, address, trust, f"hostile-{n}")
                       for n in range(-(-args.streams // per_session))]
            registered = _heartbeats(honest, args.heartbeats, pid)
            channel, _ = open_channel(address, trust)
            stub = node_pb2_grpc.NodeServiceStub(channel)
            for client in hostile:  # one connection for every hostile stream, bound to each session by its key
                bind_session(stub, client._identity, client.session_token)  # type: ignore[arg-type]
            held = [stub.ReceiveAssignments(node_pb2.ReceiveAssignmentsRequest(),
                                            metadata=client._metadata())  # its token
                    for client in hostile for _ in range(per_session)][:args.streams]
            _wait_for_streams(coordinator.extra["url"] + "/metrics", coordinator.extra["certificate"], held)
            opened_s = time.perf_counter() - started
            idle_cpu_before = cpu_seconds(pid)
            time.sleep(IDLE_S)
            idle_cpu_s = cpu_seconds(pid) - idle_cpu_before
            alive = sum(1 for call in held if not call.done())
            ended = Counter(f"{call.code().name} ({call.details()})" for call in held if call.done())
            for index, call in enumerate(held):
                if call.done():  # which session, and what the transport said: a server's status or a local cancel
                    log.info("stream %d (hostile session %d of %d) ended early: %s", index, index // per_session,
                             len(hostile), call.debug_error_string())
            log.info("timing heartbeats with %d streams held (coordinator pid %d)", alive, pid)
            loaded = _heartbeats(honest, args.heartbeats, pid)
            for call in held:
                call.cancel()
            channel.close()
        finally:
            coordinator.stop()
    out.write(f"honest node's heartbeats over TLS, {args.heartbeats} per phase, one every "
              f"{1000 * HEARTBEAT_PAUSE_S:.0f} ms:\n")
    out.write(_line("quiet", *quiet) + "\n")
    out.write(_line(f"{len(hostile)} more sessions, no streams", *registered) + "\n")
    out.write(_line(f"{alive} streams held", *loaded) + "\n")
    out.write(f"  (registering {len(hostile)} hostile sessions and opening the streams took {opened_s:.1f} s"
              + (f"; ended early: {dict(ended)}" if ended else "") + ")\n")
    out.write(f"coordinator CPU while {alive} streams are only held: {1000 * idle_cpu_s / IDLE_S:.1f} ms/s\n")
    out.write(f"p99 held / quiet: {_p99(loaded[0]) / _p99(quiet[0]):.2f}x (target <= 2x); "
              f"held / same sessions without streams: {_p99(loaded[0]) / _p99(registered[0]):.2f}x\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
