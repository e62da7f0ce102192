"""Where the first token's time goes, hop by hop: client, gateway, coordinator, node, and back.

    .venv/bin/python -m bench.first_token_hops [--requests 40] [--client bare|openai] [--model-dir DIR]

A coordinator and one node agent run as processes on loopback (SQLite), as in
bench/gateway.py, with MLXNET_HOP_TRACE naming one file: each process appends a line
per hop (contracts.hop_trace), on the machine's one monotonic clock. Streaming requests
go one at a time, 50 ms apart. For each hop it prints the median time from the
client's request, and the median step from the hop before.

The node's prefill (its MLX start to its first token) swings by several milliseconds
from run to run on a shared machine; the time outside it, the network's own part of the
time to first token, swings far less, so a change of a millisecond there shows here
when bench/gateway.py's end-to-end figures cannot see it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

from bench.gateway import MODEL_ID, Gateway, bare_completion_stream, loopback_gateway, sse_events
from contracts import hop_trace

PROMPT = "In the beginning"
MAX_TOKENS = 16
PAUSE_S = 0.05
WARM_UP_REQUESTS = 3
CLIENT_SENT, CLIENT_FIRST_TEXT = "client sent", "client has its first text"
PREFILL_STARTED, FIRST_TOKEN = "prefill started", "first token"


def _bare_request(gateway: Gateway) -> tuple[str, int, int]:
    """(job id, ns when sent, ns when its first text arrived), with http.client."""
    body = {"model": MODEL_ID, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True}
    with bare_completion_stream(gateway, body) as (sent, response):
        first = 0
        for event in sse_events(response):
            if not first and event["choices"] and event["choices"][0]["text"]:
                first = time.monotonic_ns()
        return response.headers["x-mlxnet-job-id"], sent, first


def _openai_request(client: openai.OpenAI) -> tuple[str, int, int]:
    """The same with the official OpenAI client."""
    sent, first = time.monotonic_ns(), 0
    raw = client.completions.with_raw_response.create(model=MODEL_ID, prompt=PROMPT, max_tokens=MAX_TOKENS,
                                                      temperature=0, stream=True)
    for chunk in raw.parse():
        if not first and chunk.choices and chunk.choices[0].text:
            first = time.monotonic_ns()
    return raw.headers["x-mlxnet-job-id"], sent, first


def hop_table(jobs: dict[str, list[tuple[int, str]]]) -> list[tuple[str, float, float]]:
    """(hop, median ms from the client's request, median ms from the hop before), in the hops' usual order.

    Only jobs with every hop the first job has count; a hop seen twice in a job counts at its first."""
    complete = [hops for hops in jobs.values() if any(name == CLIENT_SENT for _, name in hops)]
    if not complete:
        return []
    firsts = [{name: ns for ns, name in reversed(hops)} for hops in complete]
    order = sorted(firsts[0], key=firsts[0].__getitem__)
    rows = []
    for before, name in zip([None, *order], order):
        at = [(hops[name] - hops[CLIENT_SENT]) / 1e6 for hops in firsts if name in hops]
        steps = [(hops[name] - hops[before]) / 1e6 for hops in firsts
                 if before is not None and name in hops and before in hops]
        rows.append((name, statistics.median(at), statistics.median(steps) if steps else 0.0))
    return rows


def outside_prefill_ms(jobs: dict[str, list[tuple[int, str]]]) -> list[float]:
    """Per job: the client's time to first text less the node's prefill."""
    values = []
    for hops in jobs.values():
        at = {name: ns for ns, name in reversed(hops)}
        if {CLIENT_SENT, CLIENT_FIRST_TEXT, PREFILL_STARTED, FIRST_TOKEN} <= at.keys():
            values.append((at[CLIENT_FIRST_TEXT] - at[CLIENT_SENT] - (at[FIRST_TOKEN] - at[PREFILL_STARTED])) / 1e6)
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--client", choices=("bare", "openai"), default="bare")
    parser.add_argument("--model-dir", type=Path, help="an MLX model directory (default: the project's tiny model)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mlxnet-bench-hops-") as tmp:
        trace_path = Path(tmp) / "hops.trace"
        os.environ[hop_trace.ENVIRONMENT_VARIABLE] = str(trace_path)  # the processes started below inherit it
        with loopback_gateway(Path(tmp), args.model_dir) as gateway, gateway.openai_client() as client:
            request = (lambda: _openai_request(client)) if args.client == "openai" else \
                (lambda: _bare_request(gateway))
            for _ in range(WARM_UP_REQUESTS):
                request()
            measured = []
            for _ in range(args.requests):
                time.sleep(PAUSE_S)
                measured.append(request())
        wanted = {job_id for job_id, _, _ in measured}
        jobs = {job_id: hops for job_id, hops in hop_trace.read(str(trace_path)).items() if job_id in wanted}
    for job_id, sent, first in measured:
        jobs.setdefault(job_id, []).extend([(sent, CLIENT_SENT), (first, CLIENT_FIRST_TEXT)])
        jobs[job_id].sort()
    _report(jobs, args.client, sys.stdout)
    return 0


def _report(jobs: dict[str, list[tuple[int, str]]], client: str, out) -> None:  # type: ignore[no-untyped-def]
    out.write(f"{len(jobs)} streaming requests ({client} client, {MAX_TOKENS} tokens), medians:\n")
    out.write(f"  {'ms from request':>15}  {'step ms':>8}  hop\n")
    for name, at, step in hop_table(jobs):
        out.write(f"  {at:15.2f}  {step:8.2f}  {name}\n")
    outside = sorted(outside_prefill_ms(jobs))
    out.write(f"time to first text outside the node's prefill: p50 {statistics.median(outside):.2f} ms, "
              f"p90 {outside[int(0.9 * (len(outside) - 1))]:.2f} ms\n")


if __name__ == "__main__":
    sys.exit(main())
