"""One rank of a 2-process tensor-parallel honest node: `mlx.launch -n 2 --backend ring -- python -m
tests.adversarial.tp_node JOBS_JSON MODEL_DIR OUT_PREFIX`.

Every rank runs every job in step (the sharded model all-reduces across ranks) and writes what
it generated to OUT_PREFIX.rank<r>.jsonl, ending with a "done" line: mlx.launch exits 0 even
when a rank fails, so the caller reads each rank's file.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import mlx.core as mx

from node_agent.inference.engine import Engine
from tests.adversarial.harness import Job, generate


def main(jobs_file: Path, model_dir: Path, out_prefix: Path) -> None:
    group = mx.distributed.init(strict=True, backend="ring")
    engine = Engine(tensor_group=group)
    jobs = [Job(**fields) for fields in json.loads(jobs_file.read_text())]
    with Path(f"{out_prefix}.rank{group.rank()}.jsonl").open("w") as out:
        for job in jobs:
            result = generate(engine, model_dir, job)
            fields = {k: v for k, v in asdict(result).items() if k != "activation_commitment"}
            out.write(json.dumps({"job": asdict(job), "result": fields,
                                  "commitment": result.activation_commitment.hex(),
                                  "ranks": group.size()}) + "\n")
        out.write(json.dumps({"done": True}) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
