"""One rank of a pod job, started by mlx.launch on every member: `python -m node_agent.inference.pod_rank RUN_DIR`.

RUN_DIR/request.json says what to run (written by node_agent.pods.runner).
Every rank loads its shard (tensor parallel: `model.shard`; pipeline: a run of
layers per rank, `model.model.pipeline(group, split)`), then all ranks decode
together; each samples the same token because the logits are reduced across
ranks. Rank 0 prints each step as a `MLXNET-STEP {json}` line on stdout. Every
rank ends by writing RUN_DIR/rank-<r>.json: mlx.launch exits 0 even when a rank
fails, so the leader trusts only these files.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm import stream_generate
from mlx_lm.sample_utils import make_sampler
from mlx_lm.utils import load_model, load_tokenizer, sharded_load

log = logging.getLogger("pod_rank")

STEP_PREFIX = "MLXNET-STEP "


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def load_shard(model_dir: Path, strategy: str, group: mx.distributed.Group,
               layer_split: list[int]) -> tuple:
    """This rank's part of the model, weights loaded, and the tokenizer."""
    if strategy == "tensor":
        return sharded_load(str(model_dir), tensor_group=group)
    assert strategy == "pipeline", f"unknown pod strategy {strategy!r}"
    model, config = load_model(model_dir, lazy=True, strict=False)
    # Rank r holds split[r] layers; mlx-lm gives the first layers to the highest rank.
    model.model.pipeline(group, layer_split or None)
    mx.eval(model.parameters())
    tokenizer = load_tokenizer(model_dir, {"trust_remote_code": False},
                               eos_token_ids=config.get("eos_token_id"))
    mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))  # everyone loaded: start together
    return model, tokenizer


def run(run_dir: Path) -> dict[str, object]:
    request = json.loads((run_dir / "request.json").read_text(encoding="utf-8"))
    group = mx.distributed.init(strict=True, backend=request["backend"])
    assert group.size() == request["ranks"], f"expected {request['ranks']} ranks, got {group.size()}"
    model, tokenizer = load_shard(Path(request["model_dir"]), request["strategy"], group,
                                  request["layer_split"])
    prompt_tokens = len(tokenizer.encode(request["prompt"]))
    if prompt_tokens + request["max_tokens"] > request["max_context_tokens"]:
        return {"ok": False, "prompt_too_long": True, "error":
                f"prompt is {prompt_tokens} tokens; with max_tokens {request['max_tokens']} that "
                f"exceeds the model's context of {request['max_context_tokens']}"}
    mx.random.seed(request["seed"])
    sampler = make_sampler(temp=request["temperature"], top_p=request["top_p"])
    started = _now_ms()
    token_ids: list[int] = []
    for response in stream_generate(model, tokenizer, request["prompt"],
                                    max_tokens=request["max_tokens"], sampler=sampler):
        if response.finish_reason != "stop":  # an end-of-sequence token is not output
            token_ids.append(int(response.token))
        if group.rank() == 0:
            step = {"token": int(response.token), "text": response.text,
                    "finish_reason": response.finish_reason}
            sys.stdout.write(STEP_PREFIX + json.dumps(step) + "\n")
            sys.stdout.flush()
    # Decoding runs a step ahead: wait for every rank before any exits and closes its sockets.
    mx.synchronize()
    mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))
    return {"ok": True, "rank": group.rank(), "token_ids": token_ids,
            "prompt_tokens": prompt_tokens, "started_at_ms": started, "finished_at_ms": _now_ms()}


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s rank %(process)d %(levelname)s: %(message)s")
    run_dir = Path(argv[1])
    rank = int(os.environ.get("MLX_RANK", "0"))  # set by mlx.launch for every rank
    try:
        result = run(run_dir)
    except (OSError, ValueError, RuntimeError, KeyError, AssertionError) as error:
        log.error("rank %d failed: %s", rank, error)
        result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    (run_dir / f"rank-{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
