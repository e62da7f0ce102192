"""What a heartbeat costs as a message on the node's open Heartbeats stream, against a unary call (#27).

    .venv/bin/python -m bench.heartbeat_stream [--heartbeats 500]

Starts a coordinator process (SQLite, TLS), registers one simulated node and times its
heartbeats both ways, alternating phases (unary, stream, unary, stream) so drift on the shared
machine hits both. Prints p50/p99 latency and the coordinator's CPU per heartbeat of each way,
and the stream's ratio to unary within this run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench.held_streams import UNLIMITED_REGISTRATIONS, _heartbeats, _line, _p99, _register
from mlxnet.processes import start_coordinator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heartbeats", type=int, default=500, help="timed heartbeats per phase")
    args = parser.parse_args(argv)
    out = sys.stdout
    with tempfile.TemporaryDirectory(prefix="mlxnet-bench-heartbeats-") as tmp:
        work = Path(tmp)
        coordinator = start_coordinator(work, database_url=f"sqlite:///{work / 'c.db'}",
                                        extra_args=UNLIMITED_REGISTRATIONS)
        pid, address, trust = coordinator.process.pid, coordinator.extra["address"], coordinator.trust
        try:
            node = _register(work, address, trust, "node")
            results: dict[bool, tuple[list[float], float, float]] = {True: ([], 0.0, 0.0), False: ([], 0.0, 0.0)}
            for streamed in (False, True, False, True):
                node._stream_heartbeats = streamed  # the client's own fallback switch
                latencies, cpu_s, wall_s = _heartbeats(node, args.heartbeats, pid)
                kept = results[streamed]
                results[streamed] = (kept[0] + latencies, kept[1] + cpu_s, kept[2] + wall_s)
            node.close()
        finally:
            coordinator.stop()
    for streamed, label in ((False, "unary Heartbeat calls"), (True, "Heartbeats stream messages")):
        out.write(_line(label, *results[streamed]) + "\n")
    unary, stream = results[False], results[True]
    out.write(f"  stream / unary: p99 {_p99(stream[0]) / _p99(unary[0]):.2f}x, coordinator CPU per "
              f"heartbeat {(stream[1] / len(stream[0])) / (unary[1] / len(unary[0])):.2f}x\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
