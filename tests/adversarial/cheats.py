"""Cheating nodes: each makes a report (streamed tokens and a signed receipt) for a job it did not
honestly run. Each cheat is the strongest version we could think of: where the right model
can cheaply make a proof that fits (one prefill pass), the cheater uses it."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from contracts.receipts import FinishReason
from node_agent.identity import Identity
from node_agent.inference.engine import Engine
from tests.adversarial.harness import (
    MODEL_ID, HonestNode, Job, Report, generate, prefill_commitment, receipt_for, signed,
    with_tokens,
)

VOCABULARY = 1024  # the tiny model's


@dataclass
class CheatContext:
    engine: Engine
    honest_dir: Path
    cheat_dirs: dict[str, Path]  # tests.adversarial.models.build_cheat_models
    cheater: Identity  # the node the job is assigned to
    bystander: HonestNode  # another node serving the same model honestly
    weights_digest: str  # of the model the job names


Cheat = Callable[[CheatContext, Job], Report]


def _wrong_model(name: str) -> Cheat:
    def cheat(ctx: CheatContext, job: Job) -> Report:
        result = generate(ctx.engine, ctx.cheat_dirs[name], job)
        return signed(receipt_for(job, ctx.cheater, MODEL_ID, ctx.weights_digest, result),
                      ctx.cheater, result.token_ids)
    return cheat


def _honest(ctx: CheatContext, job: Job, **changes: object):  # type: ignore[no-untyped-def]
    result = generate(ctx.engine, ctx.honest_dir, job, **changes)  # type: ignore[arg-type]
    return result, receipt_for(job, ctx.cheater, MODEL_ID, ctx.weights_digest, result)


def changed_prompt(ctx: CheatContext, job: Job) -> Report:
    result, receipt = _honest(ctx, job, prompt="And " + job.prompt)  # the receipt names the real one
    return signed(receipt, ctx.cheater, result.token_ids)


def edited_output(ctx: CheatContext, job: Job) -> Report:
    result, receipt = _honest(ctx, job)
    tokens = list(result.token_ids)
    middle = len(tokens) // 2
    tokens[middle] = (tokens[middle] + 1 + middle) % VOCABULARY
    edited = tuple(tokens)
    proof = prefill_commitment(ctx.engine, ctx.honest_dir, job, edited)
    return signed(with_tokens(receipt, edited, activation_commitment=proof), ctx.cheater, edited)


def _truncated(finish: FinishReason) -> Cheat:
    def cheat(ctx: CheatContext, job: Job) -> Report:
        result, receipt = _honest(ctx, job, max_tokens=max(1, job.max_tokens // 2))
        return signed(dataclasses.replace(receipt, finish_reason=finish), ctx.cheater, result.token_ids)
    return cheat


def padded(ctx: CheatContext, job: Job) -> Report:
    made = max(0, job.max_tokens - 3)
    result, receipt = _honest(ctx, job, max_tokens=made)
    rng = random.Random(job.seed)
    tokens = result.token_ids + tuple(rng.randrange(VOCABULARY) for _ in range(job.max_tokens - made))
    proof = prefill_commitment(ctx.engine, ctx.honest_dir, job, tokens)
    return signed(with_tokens(receipt, tokens, activation_commitment=proof,
                              finish_reason=FinishReason.LENGTH), ctx.cheater, tokens)


def claims_more_tokens(ctx: CheatContext, job: Job) -> Report:
    result, receipt = _honest(ctx, job)
    return signed(dataclasses.replace(receipt, completion_tokens=receipt.completion_tokens + 5),
                  ctx.cheater, result.token_ids)


def claims_unstreamed_tokens(ctx: CheatContext, job: Job) -> Report:
    result, receipt = _honest(ctx, job)
    made = result.token_ids[:max(1, len(result.token_ids) // 2)]  # streams half, signs for all
    return signed(receipt, ctx.cheater, made)


def random_tokens(ctx: CheatContext, job: Job) -> Report:
    rng = random.Random(job.seed ^ 0x5EED)
    tokens = tuple(rng.randrange(VOCABULARY) for _ in range(job.max_tokens))
    result, receipt = _honest(ctx, job, max_tokens=1)  # timings and counts to dress it up
    proof = prefill_commitment(ctx.engine, ctx.honest_dir, job, tokens)
    return signed(with_tokens(receipt, tokens, activation_commitment=proof,
                              finish_reason=FinishReason.LENGTH), ctx.cheater, tokens)


def _same_job_elsewhere(job: Job) -> Job:
    return dataclasses.replace(job, job_id=job.job_id + "-twin")


def replays_another_jobs_receipt(ctx: CheatContext, job: Job) -> Report:
    twin = _same_job_elsewhere(job)
    report, _ = HonestNode(ctx.engine, ctx.honest_dir, ctx.cheater).run(twin)
    return report  # its own honest receipt, for the other job


def re_signs_another_jobs_receipt(ctx: CheatContext, job: Job) -> Report:
    twin = _same_job_elsewhere(job)
    result = generate(ctx.engine, ctx.honest_dir, twin)
    receipt = receipt_for(twin, ctx.cheater, MODEL_ID, ctx.weights_digest, result)
    return signed(dataclasses.replace(receipt, job_id=job.job_id), ctx.cheater, result.token_ids)


def signed_with_another_key(ctx: CheatContext, job: Job) -> Report:
    result, receipt = _honest(ctx, job)
    return signed(receipt, ctx.bystander.identity, result.token_ids)


def copies_another_nodes_answer(ctx: CheatContext, job: Job) -> Report:
    """Another node served the same prompt with the same sampling; copy its tokens and proof."""
    _, theirs = ctx.bystander.run(_same_job_elsewhere(job))
    receipt = receipt_for(job, ctx.cheater, MODEL_ID, ctx.weights_digest, theirs)
    return signed(receipt, ctx.cheater, theirs.token_ids)


def cheap_decode_real_prefill(ctx: CheatContext, job: Job) -> Report:
    """Decode with a 4-bit copy, then prove it with one prefill pass of the real model."""
    result = generate(ctx.engine, ctx.cheat_dirs["q4"], job)
    receipt = receipt_for(job, ctx.cheater, MODEL_ID, ctx.weights_digest, result)
    proof = prefill_commitment(ctx.engine, ctx.honest_dir, job, result.token_ids)
    return signed(dataclasses.replace(receipt, activation_commitment=proof), ctx.cheater, result.token_ids)


CHEATS: dict[str, Cheat] = {
    "different model (another seed)": _wrong_model("other-seed"),
    "different model (qwen2)": _wrong_model("qwen2"),
    "lower precision (float16)": _wrong_model("float16"),
    "lower precision (bfloat16)": _wrong_model("bfloat16"),
    "quantized (8-bit)": _wrong_model("q8"),
    "quantized (4-bit)": _wrong_model("q4"),
    "changed prompt": changed_prompt,
    "output edited after generation": edited_output,
    "truncated, claims it ended": _truncated(FinishReason.END_TOKEN),
    "truncated, claims max_tokens": _truncated(FinishReason.LENGTH),
    "padded": padded,
    "claims more tokens than made": claims_more_tokens,
    "signs for tokens it never streamed": claims_unstreamed_tokens,
    "random tokens": random_tokens,
    "another job's receipt replayed": replays_another_jobs_receipt,
    "another job's receipt re-signed": re_signs_another_jobs_receipt,
    "signed with another node's key": signed_with_another_key,
    "answer copied from another node": copies_another_nodes_answer,
    "cheap model decode, real model prefill": cheap_decode_real_prefill,
}

CHEAT_JOBS = (  # greedy and sampled, short and long, fixed so every run is the same
    Job("job-cheat-0", "In the beginning God created", 32),
    Job("job-cheat-1", "And Noah", 17, 0.7, 1.0, 11),
    Job("job-cheat-2", "And the LORD said unto Abram, Get thee out of thy country", 40, 1.0, 0.9, 12345),
    Job("job-cheat-3", "Abram", 8, 0.0, 1.0, 3),
    Job("job-cheat-4", "And God saw the light, that it was good", 24, 0.3, 0.5, 77),
    Job("job-cheat-5", "Sarai", 33, 1.5, 0.95, 1 << 62),
)
