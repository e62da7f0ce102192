"""Many streams at once: one node (continuous batching) against mlx_lm.server, same model, one run.

    .venv/bin/python -m bench.concurrency [--clients 1,8,32,64 --rounds-at-32 4 --max-tokens 128]
                                          [--slots 64 --model-dir DIR --only gateway|mlx_lm]
                                          [--shared-prompt-clients 8 --shared-prompt-tokens 1000]

Two servers on this machine, both up for the whole run, on the same model directory (the project's
tiny model unless given); each level runs on one and then at once on the other, so a shared
machine's load swings hit both sides of a comparison alike:
1. MLX Network: a coordinator (SQLite) and one node agent as processes on loopback, the node
   running up to `--slots` jobs in one continuous batch; clients go through the HTTP gateway;
2. `python -m mlx_lm.server --model DIR` with its default flags.
At each level, that many clients each stream one chat completion of `--max-tokens` tokens with
the official openai client, all started together (greedy, the same prompts for both servers).
Printed per level: aggregate tokens/s (every client's completion tokens over the wall time from
the first request to the last token), time to first token p50 and p99, and errors. For the
gateway also: jobs with an accepted receipt (each carries its activation commitment), and the
coordinator's and the node's process CPU per streamed token (user+system time over the level,
from /proc: CPU time does not swing with a shared machine's load as wall time does); for
mlx_lm.server its one process's CPU per streamed token. Each line ends with the load average.

Then the prompt cache: `--shared-prompt-clients` clients at once, each with the same system prompt
of about `--shared-prompt-tokens` tokens and its own question (one request with it went first, as
a conversation's earlier turns would), against the same clients each with a system prompt of
its own (nothing to reuse): TTFT p50 and p99 for both, and the hit rate, the share of prompt
tokens reused (usage.prompt_tokens_details.cached_tokens, where the server reports it).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai

from coordinator.money.api_keys import KeyLimits
from coordinator.storage.database import Database
from mlxnet import keys_cli
from mlxnet.processes import spawn_node, start_coordinator, wait_until_registered
from node_agent.tiny_model import build_tiny_model

MODEL_ID = "bench/model"
PROMPTS = ("Tell me of the beginning.", "Who was Noah?", "What did the LORD say unto Abram?",
           "And Abraham said", "Where is Canaan?", "Speak of the flood and the ark.")
SERVER_START_S = 120.0
CLIENT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Stream:
    ok: bool
    tokens: int
    first_s: float  # from the common start to its first text
    last_s: float  # from the common start to its last text
    job_id: str = ""
    error: str = ""
    prompt_tokens: int = 0
    cached_tokens: int | None = None  # None: the server does not report it


def _stream(client: openai.OpenAI, model: str, prompt: str, max_tokens: int, start: float,
            system: str | None = None) -> Stream:
    messages = [{"role": "user", "content": prompt}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=0.0,  # type: ignore[arg-type]
            stream=True, stream_options={"include_usage": True})
        first = last = 0.0
        tokens = prompt_tokens = 0
        cached = None
        for chunk in raw.parse():
            if chunk.usage is not None:
                tokens, prompt_tokens = chunk.usage.completion_tokens, chunk.usage.prompt_tokens
                details = chunk.usage.prompt_tokens_details
                cached = details.cached_tokens if details is not None else None
            if chunk.choices and chunk.choices[0].delta.content:
                last = time.perf_counter() - start
                first = first or last
        return Stream(True, tokens, first, last, raw.headers.get("x-mlxnet-job-id", ""), "", prompt_tokens, cached)
    except openai.APIError as error:
        return Stream(False, 0, 0.0, 0.0, error=f"{type(error).__name__}: {str(error)[:120]}")


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))] if ordered else 0.0


def _level(client: openai.OpenAI, model: str, clients: int, max_tokens: int,
           systems: list[str] | None = None) -> list[Stream]:
    """That many clients at once; systems: each client's system prompt (none by default)."""
    barrier = threading.Barrier(clients)
    start_box: list[float] = []
    lock = threading.Lock()

    def one(i: int) -> Stream:
        barrier.wait()
        with lock:
            if not start_box:
                start_box.append(time.perf_counter())
        return _stream(client, model, PROMPTS[i % len(PROMPTS)], max_tokens, start_box[0],
                       systems[i] if systems is not None else None)

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        return list(pool.map(one, range(clients)))


def _describe(streams: list[Stream]) -> str:
    done = [s for s in streams if s.ok and s.tokens]
    tokens = sum(s.tokens for s in done)
    wall = max((s.last_s for s in done), default=0.0)
    firsts = [s.first_s * 1000 for s in done]
    errors = [s.error for s in streams if not s.ok]
    text = (f"{tokens / wall if wall else 0:7.1f} tokens/s aggregate, TTFT p50 {_percentile(firsts, 0.5):7.0f} ms "
            f"p99 {_percentile(firsts, 0.99):7.0f} ms, errors {len(errors)}")
    return text + (f" (first: {errors[0]})" if errors else "")


def _shared_prompt(model_dir: Path, tokens: int) -> str:
    """A system prompt of about this many tokens in the model's own tokenizer."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    sentence = "You are a careful assistant who answers questions about the book of Genesis in plain words. "
    per_sentence = max(1, len(tokenizer.encode(sentence).ids))
    return sentence * max(1, tokens // per_sentence)


def _cache_figures(streams: list[Stream]) -> str:
    done = [s for s in streams if s.ok]
    firsts = [s.first_s * 1000 for s in done]
    text = f"TTFT p50 {_percentile(firsts, 0.5):6.0f} ms p99 {_percentile(firsts, 0.99):6.0f} ms"
    if any(s.cached_tokens is None for s in done):
        return text + ", hit rate not reported by the server"
    prompt = sum(s.prompt_tokens for s in done)
    cached = sum(s.cached_tokens or 0 for s in done)
    return text + f", hit rate {cached / prompt if prompt else 0:.0%} ({cached} of {prompt} prompt tokens reused)"


def _shared_prompt_case(client: openai.OpenAI, model: str, args: argparse.Namespace, model_dir: Path,
                        label: str) -> None:
    if not args.shared_prompt_clients:
        return
    shared = _shared_prompt(model_dir, args.shared_prompt_tokens)
    clients = args.shared_prompt_clients
    _stream(client, model, PROMPTS[0], 4, time.perf_counter(), shared)  # an earlier turn with it
    own = _level(client, model, clients, 16, [f"Session {n} of {clients}. " + shared for n in range(clients)])
    same = _level(client, model, clients, 16, [shared] * clients)
    print(f"{label} shared {args.shared_prompt_tokens}-token system prompt, {clients} clients: {_cache_figures(same)}; "
          f"each its own: {_cache_figures(own)}", flush=True)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _levels(args: argparse.Namespace) -> list[int]:
    levels = []
    for clients in (int(c) for c in args.clients.split(",")):
        levels += [clients] * (args.rounds_at_32 if clients == 32 else 1)
    return levels


@contextlib.contextmanager
def network(work_dir: Path, model_dir: Path, slots: int) -> Iterator[tuple[openai.OpenAI, tuple[int, int], str]]:
    """A coordinator and one node as processes: (a client with a funded key, the coordinator's and the
    node's pids, db url)."""
    database_url = f"sqlite:///{work_dir / 'coordinator.db'}"
    coordinator = start_coordinator(work_dir, database_url=database_url)
    node = None
    try:
        node = wait_until_registered(spawn_node(
            work_dir, "bench-node", coordinator.extra["address"], [f"{MODEL_ID}={model_dir}"],
            profile="m3-ultra-512", operator="bench", max_concurrent_jobs=slots, trust=coordinator.trust))
        db = Database(database_url)
        _, key = keys_cli.create(db, "bench", KeyLimits(), deposit_amount=10**6 * 10**9)
        db.dispose()
        # The coordinator serves TLS with its own certificate: the client trusts that one.
        client = openai.OpenAI(base_url=f"https://{coordinator.extra['http_address']}/v1", api_key=key,
                               timeout=CLIENT_TIMEOUT_S, max_retries=0,
                               http_client=openai.DefaultHttpxClient(verify=coordinator.ssl_context()))
        yield client, (coordinator.process.pid, node.process.pid), database_url
    finally:
        for child in (node, coordinator):
            if child is not None:
                child.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def mlx_lm_server(work_dir: Path, model_dir: Path) -> Iterator[tuple[openai.OpenAI, int]]:
    port = _free_port()
    with (work_dir / "mlx_lm.server.log").open("ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "mlx_lm.server", "--model", str(model_dir),
                                    "--port", str(port)], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:  # a benchmark, not a test: poll the port until the server listens
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlx_lm.server did not start; see {work_dir / 'mlx_lm.server.log'}")
            time.sleep(0.2)
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=CLIENT_TIMEOUT_S,
                            max_retries=0), process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def _proven(database_url: str, streams: list[Stream]) -> str:
    """How many of the level's jobs completed with a receipt the coordinator accepted."""
    from coordinator.storage import job_rows

    db = Database(database_url)
    try:
        with db.transaction() as session:
            jobs = [job_rows.job_by_id(session, s.job_id) for s in streams if s.job_id]
            proven = sum(1 for job in jobs if job is not None and job.receipt_verified)
    finally:
        db.dispose()
    return f"{proven} of {len(streams)} jobs with an accepted receipt"


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def _gateway_level(gateway: tuple[openai.OpenAI, tuple[int, int], str], clients: int, max_tokens: int) -> None:
    client, (coordinator_pid, node_pid), database_url = gateway
    cpu_before = _cpu_s(coordinator_pid), _cpu_s(node_pid)
    streams = _level(client, MODEL_ID, clients, max_tokens)
    time.sleep(1.0)  # receipts land after the last token
    coordinator_cpu, node_cpu = _cpu_s(coordinator_pid) - cpu_before[0], _cpu_s(node_pid) - cpu_before[1]
    tokens = max(sum(s.tokens for s in streams), 1)
    print(f"gateway    {clients:3d} clients: {_describe(streams)}; {_proven(database_url, streams)}; "
          f"CPU per streamed token: coordinator {1e6 * coordinator_cpu / tokens:.0f} us, "
          f"node {1e6 * node_cpu / tokens:.0f} us; {_load()}", flush=True)


def _mlx_lm_level(server: tuple[openai.OpenAI, int], clients: int, max_tokens: int) -> None:
    client, pid = server
    cpu_before = _cpu_s(pid)
    streams = _level(client, "default_model", clients, max_tokens)
    tokens = max(sum(s.tokens for s in streams), 1)
    print(f"mlx_lm     {clients:3d} clients: {_describe(streams)}; CPU per streamed token: "
          f"{1e6 * (_cpu_s(pid) - cpu_before) / tokens:.0f} us; {_load()}", flush=True)


def run(args: argparse.Namespace, work_dir: Path, model_dir: Path) -> None:
    with contextlib.ExitStack() as stack:
        gateway = stack.enter_context(network(work_dir, model_dir, args.slots)) if args.only != "mlx_lm" else None
        server = stack.enter_context(mlx_lm_server(work_dir, model_dir)) if args.only != "gateway" else None
        if gateway is not None:
            _level(gateway[0], MODEL_ID, 2, 8)  # warm-up: the model is loaded and its kernels built
        if server is not None:
            _level(server[0], "default_model", 2, 8)
        for clients in _levels(args):
            if gateway is not None:
                _gateway_level(gateway, clients, args.max_tokens)
            if server is not None:
                _mlx_lm_level(server, clients, args.max_tokens)
        if gateway is not None:
            _shared_prompt_case(gateway[0], MODEL_ID, args, model_dir, "gateway   ")
        if server is not None:
            _shared_prompt_case(server[0], "default_model", args, model_dir, "mlx_lm    ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,8,32,64")
    parser.add_argument("--rounds-at-32", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--slots", type=int, default=64, help="the node's max concurrent jobs (its batch)")
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--only", choices=("gateway", "mlx_lm"))
    parser.add_argument("--shared-prompt-clients", type=int, default=8, help="0 skips the prompt cache case")
    parser.add_argument("--shared-prompt-tokens", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp:
        work_dir = Path(tmp)
        model_dir = args.model_dir or build_tiny_model(work_dir / "tiny")
        print(f"model {model_dir}; {args.max_tokens} tokens a client; levels {_levels(args)}", flush=True)
        run(args, work_dir, model_dir)


if __name__ == "__main__":
    main()
