"""The consumer API's cost: tokens/s and time to first token through the whole path.

    .venv/bin/python -m bench.gateway [--runs 20] [--max-tokens 128] [--concurrency 32]
                                        [--model-dir DIR]

One run, one model, one machine:
1. mlx_lm.stream_generate in this process (the reference);
2. the same prompts streamed with the official OpenAI client through
   client -> HTTP gateway -> coordinator -> node agent -> MLX -> back,
   a coordinator and one node agent running as processes on loopback (SQLite);
3. `--concurrency` streaming clients at once through the same path.

Decode rate is (tokens - 1) / (last token time - first token time), the same for
both paths; time to first token runs from the request to its first text. The gateway's
time to first token is also taken with a bare HTTP client (http.client, reading the
events line by line), which leaves out the OpenAI client's own work in this process:
the difference is the client library's, not the network's.

`--coordinator-nice N` runs the coordinator at a lower CPU priority (Linux: every thread).
In use the coordinator runs on a server and the node on its own Mac; on this one machine
they share the cores, and a niced coordinator yields them to MLX as a server elsewhere would.
The default (0) shares them equally. The node
hands each token after the first over one step late (so its text is final), and
sends the tokens that come within node_agent.token_sender.FLUSH_INTERVAL_S of each
other as one message; neither changes the first or the last token's time (the last
message goes once the last token is made, before the node computes its proof).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.client
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
from mlx_lm import load, stream_generate

from coordinator.money.api_keys import KeyLimits
from coordinator.storage.database import Database
from mlxnet import keys_cli
from mlxnet.processes import spawn_node, start_coordinator, wait_until_registered
from node_agent.tiny_model import build_tiny_model

MODEL_ID = "bench/model"
# A pause before each measured run, so none starts in the last one's tail: after a direct
# run this process's MLX threads burn 1-4 ms of CPU in the next 5 ms (measured with
# time.process_time around a sleep), and a gateway job's node and coordinator finish its
# receipt after the client's last token.
SETTLE_S = 0.05
PROMPTS = ("In the beginning", "And Noah", "And the LORD said", "And Abraham", "And Sarah")


@dataclass(frozen=True)
class Run:
    tokens: int
    first_s: float  # time to first token
    decode_s: float  # first token to last
    job_id: str = ""
    sent_ms: int = 0  # wall clock when the request went out
    first_ms: int = 0  # wall clock when its first text arrived

    @property
    def tokens_per_s(self) -> float:
        return (self.tokens - 1) / self.decode_s if self.decode_s > 0 else 0.0


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _direct(model, tokenizer, prompt: str, max_tokens: int) -> Run:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    times = [time.perf_counter() for _ in stream_generate(model, tokenizer, prompt,
                                                          max_tokens=max_tokens)]
    return Run(len(times), times[0] - started, times[-1] - times[0])


def _through_gateway(client: openai.OpenAI, prompt: str, max_tokens: int) -> Run:
    sent_ms, started = time.time_ns() // 1_000_000, time.perf_counter()
    first = last = 0.0
    first_ms, tokens = 0, 0
    raw = client.completions.with_raw_response.create(
        model=MODEL_ID, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True})
    for chunk in raw.parse():
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        elif chunk.choices and chunk.choices[0].text:
            last = time.perf_counter()
            if not first:
                first, first_ms = last, time.time_ns() // 1_000_000
    return Run(tokens, first - started, last - first, raw.headers["x-mlxnet-job-id"], sent_ms,
               first_ms)


def _through_bare_http(gateway: Gateway, prompt: str, max_tokens: int) -> Run:
    """The same request with http.client: what a minimal client waits for its first text."""
    body = {"model": MODEL_ID, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    with bare_completion_stream(gateway, body) as (sent_ns, response):
        first = last = tokens = 0
        for event in sse_events(response):
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            elif event["choices"] and event["choices"][0]["text"]:
                last = time.monotonic_ns()
                first = first or last
    return Run(tokens, (first - sent_ns) / 1e9, (last - first) / 1e9)


@dataclass(frozen=True)
class Gateway:
    """A gateway on loopback: its HOST:PORT, a funded key, the model, and its TLS certificate."""

    address: str
    key: str
    model_dir: Path
    ssl_context: ssl.SSLContext | None  # None: plaintext (--insecure)
    coordinator_pid: int = 0

    @property
    def base_url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{self.address}/v1"

    def openai_client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=self.key, max_retries=0, timeout=600,
                             http_client=openai.DefaultHttpxClient(verify=self.ssl_context or False))


@contextlib.contextmanager
def bare_completion_stream(gateway: Gateway,
                           body: dict[str, object]) -> Iterator[tuple[int, http.client.HTTPResponse]]:
    """POST a streaming completion with http.client: (monotonic ns when it went out, the answer, a 200)."""
    host, port = gateway.address.rsplit(":", 1)
    text = json.dumps(body)
    connection = (http.client.HTTPSConnection(host, int(port), timeout=600, context=gateway.ssl_context)
                  if gateway.ssl_context else http.client.HTTPConnection(host, int(port), timeout=600))
    try:
        sent_ns = time.monotonic_ns()
        connection.request("POST", "/v1/completions", text, {"Authorization": f"Bearer {gateway.key}",
                                                               "Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"gateway answered {response.status}: {response.read()[:300]!r}")
        yield sent_ns, response
    finally:
        connection.close()


def sse_events(response: http.client.HTTPResponse) -> Iterator[dict]:
    """The stream's JSON events, line by line as they arrive ([DONE] left out)."""
    for line in response:
        if line.startswith(b"data: {"):
            yield json.loads(line[6:])


@contextlib.contextmanager
def loopback_gateway(work_dir: Path, model_dir: Path | None, max_concurrent_jobs: int = 1,
                     coordinator_nice: int = 0, tls: bool = True) -> Iterator[Gateway]:
    """A coordinator (SQLite) and one node agent as processes on loopback, and a funded key;
    the model is the project's tiny model unless given. tls=False: plaintext (--insecure)."""
    model_dir = model_dir or build_tiny_model(work_dir / "tiny")
    database_url = f"sqlite:///{work_dir / 'coordinator.db'}"
    coordinator = start_coordinator(work_dir, database_url=database_url, tls=tls)
    _renice(coordinator.process.pid, coordinator_nice)
    node = None
    try:
        node = wait_until_registered(spawn_node(
            work_dir, "bench-node", coordinator.extra["address"], [f"{MODEL_ID}={model_dir}"],
            profile="m3-ultra-512", operator="bench", max_concurrent_jobs=max_concurrent_jobs,
            trust=coordinator.trust))
        db = Database(database_url)
        _, key = keys_cli.create(db, "bench", KeyLimits(), deposit_amount=10**6 * 10**9)
        db.dispose()
        yield Gateway(coordinator.extra["http_address"], key, model_dir,
                      coordinator.ssl_context() if tls else None, coordinator.process.pid)
    finally:
        for child in (node, coordinator):
            if child is not None:
                child.stop()


def _renice(pid: int, niceness: int) -> None:
    """Lower a process's CPU priority. Linux keeps a niceness per thread: set each one's
    (threads started later inherit their starter's)."""
    if not niceness:
        return
    task_dir = Path(f"/proc/{pid}/task")
    for tid in [int(t) for t in os.listdir(task_dir)] if task_dir.is_dir() else [pid]:
        os.setpriority(os.PRIO_PROCESS, tid, niceness)


def _phases(client: openai.OpenAI, runs: list[Run]) -> dict[str, float]:
    """Median ms of each step to the first token, from the job records and receipts."""
    steps: dict[str, list[float]] = {"node's own decode tokens/s": [],
                                     "request to the node's MLX start": [],
                                     "MLX start to the node's first token": [],
                                     "node's first token to the coordinator": [],
                                     "coordinator to the client": []}
    for run in runs:
        job = client.get(f"/jobs/{run.job_id}", cast_to=object)
        receipt = client.get(f"/jobs/{run.job_id}/receipt", cast_to=object)["fields"]
        timing, node_first_ms = job["timing"], receipt.get("first_token_at_ms", 0)
        steps["node's own decode tokens/s"].append(
            1000 * (receipt["completion_tokens"] - 1) / max(1, receipt["finished_at_ms"] - node_first_ms))
        # The node's clock: the machine's own, so these line up with the client's.
        steps["request to the node's MLX start"].append(receipt["started_at_ms"] - run.sent_ms)
        steps["MLX start to the node's first token"].append(node_first_ms - receipt["started_at_ms"])
        steps["node's first token to the coordinator"].append(
            timing["first_token_at_ms"] - node_first_ms)
        steps["coordinator to the client"].append(run.first_ms - timing["first_token_at_ms"])
    return {name: statistics.median(values) for name, values in steps.items()}


def _alternating(model_dir: Path, client: openai.OpenAI, gateway: Gateway, runs: int,
                 max_tokens: int) -> tuple[list[Run], list[Run], list[Run]]:
    """Direct, gateway and bare-HTTP runs in turns, so a busy moment on the machine hits all alike."""
    model, tokenizer = load(str(model_dir))
    _direct(model, tokenizer, "warm up", 4)
    _through_gateway(client, "warm up", 4)
    direct, through_gateway, bare = [], [], []  # not "gateway": that names the Gateway the bare runs use
    for index in range(runs):
        prompt = PROMPTS[index % len(PROMPTS)]
        time.sleep(SETTLE_S)
        direct.append(_direct(model, tokenizer, prompt, max_tokens))
        time.sleep(SETTLE_S)
        through_gateway.append(_through_gateway(client, prompt, max_tokens))
        time.sleep(SETTLE_S)
        bare.append(_through_bare_http(gateway, prompt, max_tokens))
    return direct, through_gateway, bare


def _concurrent(client: openai.OpenAI, clients: int, max_tokens: int) -> tuple[list[Run], float]:
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        runs = list(pool.map(lambda i: _through_gateway(client, PROMPTS[i % len(PROMPTS)],
                                                         max_tokens), range(clients)))
    return runs, time.perf_counter() - started


def _report(direct: list[Run], gateway: list[Run], bare: list[Run], loaded: list[Run], wall_s: float,
            clients: int, phases: dict[str, float], out) -> None:  # type: ignore[no-untyped-def]
    direct_rate = statistics.median(r.tokens_per_s for r in direct)
    gateway_rate = statistics.median(r.tokens_per_s for r in gateway)
    direct_ttft = [r.first_s * 1000 for r in direct]
    gateway_ttft = [r.first_s * 1000 for r in gateway]
    out.write(f"decode tokens/s, median of {len(direct)} runs: direct {direct_rate:.1f}, "
              f"through the gateway {gateway_rate:.1f} ({100 * gateway_rate / direct_rate:.1f}% "
              "of direct; target >= 95%)\n")
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        d, g = _percentile(direct_ttft, fraction), _percentile(gateway_ttft, fraction)
        b = _percentile([r.first_s * 1000 for r in bare], fraction)
        out.write(f"time to first token {name}: direct {d:.1f} ms, gateway {g:.1f} ms, "
                  f"added {g - d:.1f} ms{' (target <= 15 ms)' if name == 'p50' else ''}; with a bare "
                  f"HTTP client {b:.1f} ms, added {b - d:.1f} ms\n")
    node_rate = phases.pop("node's own decode tokens/s")
    out.write(f"  the node's own decode rate, from its receipts (MLX plus its proof recording): "
              f"{node_rate:.1f} tokens/s\n")
    out.write("  where the gateway's first token goes (median ms): " + "; ".join(f"{name} {ms:.0f}" for name, ms in phases.items()) + "\n")
    tokens = sum(r.tokens for r in loaded)
    loaded_ttft = [r.first_s * 1000 for r in loaded]
    out.write(f"{clients} concurrent streaming clients: {tokens} tokens in {wall_s:.2f} s = "
              f"{tokens / wall_s:.1f} tokens/s aggregate; time to first token p50 "
              f"{_percentile(loaded_ttft, 0.5):.0f} ms, p99 {_percentile(loaded_ttft, 0.99):.0f} ms\n")
    out.write(f"(load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--coordinator-nice", type=int, default=0, help="run the coordinator at this "
                        "niceness (0-19), as if on a server of its own (see above)")
    parser.add_argument("--model-dir", type=Path, help="an MLX model directory (default: the "
                        "project's tiny model, built here)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mlxnet-bench-gateway-") as tmp, \
            loopback_gateway(Path(tmp), args.model_dir, args.concurrency, args.coordinator_nice) as served, \
            served.openai_client() as client:
        direct, gateway, bare = _alternating(served.model_dir, client, served, args.runs, args.max_tokens)
        phases = _phases(client, gateway)
        loaded, wall_s = _concurrent(client, args.concurrency, args.max_tokens)
    _report(direct, gateway, bare, loaded, wall_s, args.concurrency, phases, sys.stdout)
    if args.coordinator_nice:
        sys.stdout.write(f"(the coordinator ran at niceness {args.coordinator_nice})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
