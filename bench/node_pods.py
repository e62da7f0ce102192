"""Pod versus single-process decode speed on the ring backend over loopback.

    .venv/bin/python bench/node_pods.py [--tokens 256] [--ranks 2]

For the tiny llama (tensor parallel) and the tiny qwen2 (pipeline), runs the
same greedy job in one process (the node's Engine) and as a pod (mlx.launch,
ring over 127.0.0.1, the node's pod runner), and prints decode tokens/s
(tokens after the first over the time from the first token to the last) and
the wall time of the whole pod run including process start-up.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from contracts.hardware import LinkKind
from node_agent.coordinator_client import Assignment
from node_agent.inference.engine import Engine, GenerationRequest, GenerationResult
from node_agent.tiny_model import build_tiny_model
from node_agent.lending.config import PodConfig, PodLinkConfig
from node_agent.model_files import describe_model
from node_agent.pods.runner import PodRun

PROMPT = "In the beginning"


class _Sink:
    def note_prompt_tokens(self, count: int) -> None:
        pass

    def offer(self, index: int, token_id: int, text: str) -> bool:
        return True


def _decode_rate(result: GenerationResult) -> float:
    seconds = (result.finished_at_ms - result.first_token_at_ms) / 1000
    return (len(result.token_ids) - 1) / seconds if seconds > 0 else float("nan")


def _single(model_dir: Path, tokens: int) -> GenerationResult:
    engine = Engine()
    request = GenerationRequest(str(model_dir), PROMPT, tokens, 0.0, 1.0, 0, "bench-single")
    engine.generate(request, 2048, lambda *_: True)  # warm up: load and first compile
    return engine.generate(request, 2048, lambda *_: True)


def _pod(model_dir: Path, strategy: str, ranks: int, tokens: int, runs_dir: Path) -> tuple[GenerationResult, float]:
    members = tuple(f"node-{r}" for r in range(ranks))
    config = PodConfig(pod_id="bench", members=members, hosts=("127.0.0.1",) * ranks,
                       ips=("127.0.0.1",) * ranks,
                       links=tuple(PodLinkConfig(members[r], members[r + 1], LinkKind.TCP_THUNDERBOLT)
                                   for r in range(ranks - 1)), backend="ring")
    spec = describe_model("bench", model_dir)
    layers = spec.num_layers // ranks
    split = tuple(layers + (1 if r < spec.num_layers % ranks else 0) for r in range(ranks))
    assignment = Assignment(f"bench-{strategy}", spec, PROMPT, tokens, 0.0, 1.0, 0, strategy,
                            "bench", members[0], members, split)
    started = time.perf_counter()
    outcome = PodRun(config, {"bench": model_dir}, runs_dir)(assignment, _Sink(), lambda: True)  # type: ignore[arg-type]
    wall_s = time.perf_counter() - started
    assert outcome.result is not None, outcome.handed_back_reason or outcome.failure_reason
    return outcome.result, wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        for architecture, strategy in (("llama", "tensor"), ("qwen2", "pipeline")):
            model_dir = build_tiny_model(Path(work) / architecture, architecture=architecture)
            single = _single(model_dir, args.tokens)
            pod, wall_s = _pod(model_dir, strategy, args.ranks, args.tokens, Path(work) / "runs")
            same = "same tokens" if pod.token_ids == single.token_ids else "DIFFERENT tokens"
            print(f"{architecture} {strategy:8s} single {_decode_rate(single):6.0f} tok/s | "
                  f"{args.ranks}-rank pod {_decode_rate(pod):6.0f} tok/s "
                  f"({wall_s:.1f} s wall incl. start-up) | {same}")


if __name__ == "__main__":
    main()
