"""One rank of a pod job, started by mlx.launch on every member: `python -m node_agent.inference.pod_rank RUN_DIR`.

RUN_DIR/request.json says what to run (written by node_agent.pods.runner).
Every rank loads its shard (tensor parallel: `model.shard`; pipeline: a run of
layers per rank, `model.model.pipeline(group, split)`), then all ranks run the
node's own Engine in step, so a pod job yields the same tokens, activation
commitment and receipt fields as one Mac; every rank samples the same token
because the logits are reduced across ranks. Rank 0 prints the prompt length
and each token (already one step late, as Engine hands them) on stdout. Every
rank ends by writing RUN_DIR/rank-<r>.json: mlx.launch exits 0 even when a rank
fails, so the leader trusts only these files.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm.utils import load_model, load_tokenizer, sharded_load

from node_agent.inference.engine import Engine, GenerationRequest, PromptTooLong

log = logging.getLogger("pod_rank")

STEP_PREFIX = "MLXNET-STEP "
PROMPT_PREFIX = "MLXNET-PROMPT "


class ShardEngine(Engine):
    """The node's engine over a model this rank has already loaded and sharded."""

    def __init__(self, model_dir: Path, model, tokenizer) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self._shard_path, self._shard = str(model_dir), (model, tokenizer)

    def _model(self, path: str) -> tuple:
        assert path == self._shard_path, "a pod rank holds one model"
        return self._shard


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


def _emit(prefix: str, payload: object) -> None:
    sys.stdout.write(prefix + json.dumps(payload) + "\n")
    sys.stdout.flush()


def run(run_dir: Path) -> dict[str, object]:
    request = json.loads((run_dir / "request.json").read_text(encoding="utf-8"))
    group = mx.distributed.init(strict=True, backend=request["backend"])
    if group.size() != request["ranks"]:
        raise RuntimeError(f"mlx.launch started {group.size()} ranks; the pod has {request['ranks']}")
    model_dir = Path(request["model_dir"])
    engine = ShardEngine(model_dir, *load_shard(model_dir, request["strategy"], group,
                                                request["layer_split"]))
    leader = group.rank() == 0
    generation = GenerationRequest(
        model_path=str(model_dir), prompt=request["prompt"], max_tokens=request["max_tokens"],
        temperature=request["temperature"], top_p=request["top_p"], seed=request["seed"],
        job_id=request["job_id"])

    def on_token(index: int, token_id: int, text: str) -> bool:
        if leader:
            _emit(STEP_PREFIX, {"index": index, "token": token_id, "text": text})
        return True

    try:
        result = engine.generate(generation, request["max_context_tokens"], on_token,
                                 lambda count: _emit(PROMPT_PREFIX, count) if leader else None)
    except PromptTooLong as error:
        return {"ok": False, "prompt_too_long": True, "error": str(error)}
    # Decoding runs a step ahead: wait for every rank before any exits and closes its sockets.
    mx.synchronize()
    mx.eval(mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu))
    return {"ok": True, "rank": group.rank(), "token_ids": list(result.token_ids),
            "text": result.text, "prompt_tokens": result.prompt_tokens,
            "started_at_ms": result.started_at_ms, "finished_at_ms": result.finished_at_ms,
            "finish_reason": int(result.finish_reason), "first_token_at_ms": result.first_token_at_ms,
            "activation_commitment": result.activation_commitment.hex()}


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s rank %(process)d %(levelname)s: %(message)s")
    run_dir = Path(argv[1])
    rank = int(os.environ.get("MLX_RANK", "0"))  # set by mlx.launch for every rank
    try:
        result = run(run_dir)
    except (OSError, ValueError, RuntimeError, KeyError) as error:
        log.error("rank %d failed: %s", rank, error)
        result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    (run_dir / f"rank-{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
