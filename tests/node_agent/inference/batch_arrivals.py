"""Random arrivals into a continuous batch: every job's stream holds its own tokens only.

    python -m tests.node_agent.inference.batch_arrivals MODEL_DIR [--schedules 6 --seed 7]

Run as a child process by test_batch.py. Each schedule adds jobs at random steps, some at a step
boundary and some while a step prefills (random prompts, lengths, temperatures and seeds, some
cancelled mid-way), and steps the batch until
it is idle. Each stream must be exactly the job's own tokens, indices 0, 1, 2, ... with no
gap: greedy and seeded jobs equal the same job run alone (a cancelled one, a prefix of it).
Prints one JSON line: schedules, jobs, cancelled, those that joined mid-step, and the mismatches found.
"""

from __future__ import annotations

import argparse
import json
import random

from node_agent.inference.batch import Batches, JobSink
from node_agent.inference.engine import Engine, GenerationRequest

WORDS = "In the beginning God created the heaven and the earth And Noah Abram Isaac said unto".split()
CONTEXT = 4096


def _request(model_dir: str, rng: random.Random, job_id: str) -> GenerationRequest:
    prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))
    temperature = rng.choice((0.0, 0.0, 0.7, 1.2))
    return GenerationRequest(model_dir, prompt, rng.randint(1, 40), temperature, rng.choice((1.0, 0.9)),
                             rng.randrange(1 << 40), job_id)


def run_schedule(engine: Engine, model_dir: str, rng: random.Random, number: int) -> tuple[int, int, int, list]:
    batches = Batches(engine, slots=rng.choice((2, 4, 8, 16)))
    pending = [(rng.randint(0, 30), _request(model_dir, rng, f"s{number}-j{i}")) for i in range(rng.randint(5, 12))]
    cancel_at = {request.job_id: rng.randint(1, 10) for _, request in pending if rng.random() < 0.25}
    mid_step = {request.job_id for _, request in pending if rng.random() < 0.6}  # arrive during a prefill
    streams: dict[str, list[tuple[int, int]]] = {}
    jobs = {}
    step = 0
    mid = [0]  # jobs that joined a step while it prefilled

    def arrive(during_step: bool) -> None:
        # One due during a step the batch did not prefill in (idle, or its budget spent) comes at the next boundary.
        for at, request in [p for p in pending
                            if p[0] <= step and ((p[1].job_id in mid_step) == during_step or p[0] < step)]:
            pending.remove((at, request))
            stream = streams[request.job_id] = []

            def on_token(index: int, token_id: int, text: str, stream=stream, job_id=request.job_id) -> bool:
                stream.append((index, token_id))
                return len(stream) != cancel_at.get(job_id)

            jobs[request.job_id] = (request, batches.add(request, CONTEXT, JobSink(on_token)))
            mid[0] += during_step

    while pending or batches.busy:
        arrive(False)
        batches.step(lambda: arrive(True))
        step += 1
    mismatches = []
    for job_id, (request, job) in jobs.items():
        alone = engine.generate(request, CONTEXT, lambda index, token_id, text: True).token_ids
        got = streams[job_id]
        if [index for index, _ in got] != list(range(len(got))):
            mismatches.append((job_id, "indices", [index for index, _ in got]))
        tokens = tuple(token_id for _, token_id in got)
        stopped = job.result is not None and job.result.stopped_early
        if (tokens != alone[:len(tokens)]) if stopped else (tokens != alone):
            mismatches.append((job_id, "tokens", tokens, alone))
    return len(jobs), len(cancel_at), mid[0], mismatches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--schedules", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    engine, rng = Engine(), random.Random(args.seed)
    total = cancelled = mid_step = 0
    mismatches: list = []
    for number in range(args.schedules):
        jobs, cancels, mids, found = run_schedule(engine, args.model_dir, rng, number)
        total, cancelled, mid_step, mismatches = total + jobs, cancelled + cancels, mid_step + mids, mismatches + found
    print(json.dumps({"schedules": args.schedules, "jobs": total, "cancelled": cancelled, "mid_step": mid_step,
                      "mismatches": mismatches}))


if __name__ == "__main__":
    main()
