"""Completion throughput over TLS against plaintext, on loopback (issue 25: target >= 95%).

    .venv/bin/python -m bench.tls [--rounds 4] [--requests 40] [--concurrency 4] [--max-tokens 16]

Starts two networks side by side, each a coordinator and one node agent (real MLX, the
project's tiny model) on SQLite: one serving TLS with its self-signed certificate, the other
plaintext (--insecure). Rounds alternate between them; each round sends the same streaming
chat completions through the official OpenAI client (TLS: with the coordinator's certificate
as its CA) and counts completions per second of wall time, and the coordinator's CPU time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.gateway import MODEL_ID, Gateway, loopback_gateway
from bench.process_cpu import cpu_seconds
from node_agent.tiny_model import build_tiny_model

PROMPTS = ("In the beginning", "And Noah", "And the LORD said unto Abram", "And Sarah")


@dataclass
class Tally:
    completions: int = 0
    wall_s: float = 0.0
    coordinator_cpu_s: float = 0.0
    rounds: list[float] = field(default_factory=list)  # completions/s of each round


def _round(gateway: Gateway, client, requests: int, concurrency: int, max_tokens: int, tally: Tally) -> None:  # type: ignore[no-untyped-def]
    def one(n: int) -> int:
        stream = client.chat.completions.create(
            model=MODEL_ID, max_tokens=max_tokens, temperature=0, stream=True,
            messages=[{"role": "user", "content": PROMPTS[n % len(PROMPTS)]}])
        return sum(1 for _ in stream)

    cpu_before, started = cpu_seconds(gateway.coordinator_pid), time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        done = sum(1 for events in pool.map(one, range(requests)) if events > 0)
    wall_s = time.perf_counter() - started
    tally.completions += done
    tally.wall_s += wall_s
    tally.coordinator_cpu_s += cpu_seconds(gateway.coordinator_pid) - cpu_before
    tally.rounds.append(done / wall_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=40, help="completions per round")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args(argv)
    tallies = {"tls": Tally(), "plaintext": Tally()}
    with tempfile.TemporaryDirectory(prefix="mlxnet-bench-tls-") as tmp, contextlib.ExitStack() as stack:
        model_dir = build_tiny_model(Path(tmp) / "tiny")
        gateways = {mode: stack.enter_context(loopback_gateway(
            Path(tmp) / mode, model_dir, args.concurrency, tls=(mode == "tls"))) for mode in tallies}
        clients = {mode: stack.enter_context(gateway.openai_client()) for mode, gateway in gateways.items()}
        for mode, gateway in gateways.items():  # warm up: models loaded, connections open
            _round(gateway, clients[mode], args.concurrency, args.concurrency, args.max_tokens, Tally())
        for _ in range(args.rounds):
            for mode, gateway in gateways.items():
                _round(gateway, clients[mode], args.requests, args.concurrency, args.max_tokens, tallies[mode])
    out = sys.stdout
    out.write(f"{args.rounds} alternating rounds of {args.requests} streamed chat completions "
              f"({args.max_tokens} tokens, {args.concurrency} at once) per mode, on loopback:\n")
    for mode, tally in tallies.items():
        rate = tally.completions / tally.wall_s
        out.write(f"  {mode:<9} {rate:7.2f} completions/s (rounds: "
                  f"{', '.join(f'{r:.2f}' for r in tally.rounds)}); coordinator CPU "
                  f"{1000 * tally.coordinator_cpu_s / tally.completions:.2f} ms per completion\n")
    tls, plain = (tallies[m].completions / tallies[m].wall_s for m in ("tls", "plaintext"))
    out.write(f"TLS throughput is {100 * tls / plain:.1f}% of plaintext (target >= 95%)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
