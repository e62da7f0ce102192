"""Tokens/s through the whole network beside direct mlx_lm on the same model.

    .venv/bin/python bench/foundation.py [--tokens 128] [--jobs 5]

Runs a coordinator and one node agent as processes on loopback (SQLite), then
for the same prompts measures (a) mlx_lm.stream_generate in this process and
(b) submit + stream through the network, one job at a time, so both numbers
are single-stream decode rates including everything each path does.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from mlx_lm import load, stream_generate

from mlxnet.consumer import JobClient, StreamedTokens
from mlxnet.processes import start_coordinator, start_nodes
from node_agent.tiny_model import build_tiny_model

PROMPTS = ("In the beginning", "And Noah", "And the LORD said", "And Abraham", "And Sarah")


def _direct(model_dir: Path, tokens: int) -> tuple[int, float]:
    model, tokenizer = load(str(model_dir))
    list(stream_generate(model, tokenizer, "warm up", max_tokens=4))
    made, started = 0, time.perf_counter()
    for prompt in PROMPTS:
        made += sum(1 for _ in stream_generate(model, tokenizer, prompt, max_tokens=tokens))
    return made, time.perf_counter() - started


def _network(work_dir: Path, model_dir: Path, tokens: int) -> tuple[int, float]:
    coordinator = start_coordinator(work_dir, allow_anonymous=True)
    nodes = start_nodes(work_dir, coordinator.extra["address"],
                        [("bench-node", [f"bench/tiny={model_dir}"], "m3-ultra-512", "bench")],
                        coordinator.trust)
    try:
        with JobClient(coordinator.extra["address"], trust=coordinator.trust) as client:
            job = client.submit("bench/tiny", "warm up", max_tokens=4)
            list(client.stream(job.job_id))
            made, started = 0, time.perf_counter()
            for prompt in PROMPTS:
                job = client.submit("bench/tiny", prompt, max_tokens=tokens)
                made += sum(len(i.token_ids) for i in client.stream(job.job_id)
                            if isinstance(i, StreamedTokens))
            return made, time.perf_counter() - started
    finally:
        for child in [*nodes, coordinator]:
            child.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "tiny")
        direct_tokens, direct_s = _direct(model_dir, args.tokens)
        network_tokens, network_s = _network(Path(tmp), model_dir, args.tokens)
    print(f"direct mlx_lm:   {direct_tokens} tokens in {direct_s:.2f}s = "
          f"{direct_tokens / direct_s:.1f} tokens/s")
    print(f"through network: {network_tokens} tokens in {network_s:.2f}s = "
          f"{network_tokens / network_s:.1f} tokens/s (submit, place, stream, receipt, credit)")
    print(f"ratio: {(network_tokens / network_s) / (direct_tokens / direct_s):.2f}")


if __name__ == "__main__":
    main()
