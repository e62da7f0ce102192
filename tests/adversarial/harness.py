"""In-process proof harness: honest and cheating nodes against the coordinator's own checks.

A job here goes through exactly what the coordinator runs on a real one: the
door (`coordinator.jobs.receipt_check.check_receipt`, against the job as recorded and
the assigned node's registered key) and then the replay check
(`coordinator.verification.replay_check.check_by_replay` on an MLX
`LocalReplayer` holding the real model). Only the network between them is left
out, so hundreds of jobs stay cheap. bench/verify.py and
bench/calibrate_tolerances.py use it too.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contracts.commitments import ActivationCommitment, chunk_key, commit_chunk, encode_commitment
from contracts.ids import node_id_from_public_key
from contracts.models import ModelSpec
from contracts.receipts import Receipt, encode_receipt, output_digest
from coordinator.jobs.receipt_check import ExpectedJob, check_receipt
from coordinator.verification.judge import CheckVerdict
from coordinator.verification.replay_check import check_by_replay
from coordinator.verification.tolerances import DEFAULT_TOLERANCES, Tolerances
from node_agent.coordinator_client import Assignment
from node_agent.identity import Identity
from node_agent.inference.batch import Batches, JobSink
from node_agent.inference.engine import Engine, GenerationRequest, GenerationResult, LocalReplayer
from node_agent.job_reports import job_receipt
from node_agent.model_files import describe_model

MODEL_ID = "test/tiny-llama"
CONTEXT_TOKENS = 2048
WORDS = ("In the beginning God created the heaven and the earth And the earth was without form "
         "and void and darkness was upon the face of the deep And the Spirit of God moved upon "
         "the face of the waters And God said Let there be light and there was light Abram "
         "Sarai Noah Lot Isaac Egypt Canaan flood ark covenant").split()


def new_identity() -> Identity:
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return Identity(key, raw, node_id_from_public_key(raw))


@dataclass(frozen=True)
class Job:
    job_id: str
    prompt: str
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0


def varied_jobs(count: int, seed: int, max_tokens_max: int = 48, words_max: int = 40) -> list[Job]:
    """Jobs with varied prompts, lengths, seeds, temperatures and top_p, fixed by `seed`."""
    rng = random.Random(seed)
    jobs = []
    for number in range(count):
        words = rng.randint(1, words_max)
        start = rng.randrange(len(WORDS))
        prompt = " ".join(WORDS[(start + i * rng.choice((1, 1, 2, 3))) % len(WORDS)] for i in range(words))
        jobs.append(Job(job_id=f"job-{seed}-{number}", prompt=prompt,
                        max_tokens=rng.randint(1, max_tokens_max),
                        temperature=rng.choice((0.0, 0.0, 0.3, 0.7, 1.0, 1.5)),
                        top_p=rng.choice((1.0, 1.0, 0.95, 0.8, 0.5)),
                        seed=rng.randrange(1 << 63)))
    return jobs


@dataclass(frozen=True)
class Report:
    """What a node hands the coordinator: the tokens it streamed and its signed receipt."""

    streamed: tuple[int, ...]
    body: bytes
    signature: bytes


def receipt_for(job: Job, node: Identity, model_id: str, weights_digest: str,
                result: GenerationResult) -> Receipt:
    """What the agent signs for a generation result: node_agent.job_reports builds it."""
    # Only the id and digest reach a receipt; the sizes just satisfy ModelSpec.
    spec = ModelSpec(model_id=model_id, weights_bytes=1, parameter_count=1, num_layers=1,
                     num_attention_heads=1, num_kv_heads=1, head_dim=1,
                     max_context_tokens=CONTEXT_TOKENS, weights_digest=weights_digest)
    assignment = Assignment(job.job_id, spec, job.prompt, job.max_tokens, job.temperature,
                            job.top_p, job.seed)
    return job_receipt(assignment, result, node.node_id)


def signed(receipt: Receipt, signer: Identity, streamed: tuple[int, ...] | None = None) -> Report:
    body = encode_receipt(receipt)
    tokens = streamed if streamed is not None else ()
    return Report(tokens, body, signer.sign(body))


def generate(engine: Engine, model_dir: Path, job: Job, *, prompt: str | None = None,
             seed: int | None = None, max_tokens: int | None = None, job_id: str | None = None) -> GenerationResult:
    request = GenerationRequest(
        model_path=str(model_dir), prompt=job.prompt if prompt is None else prompt,
        max_tokens=job.max_tokens if max_tokens is None else max_tokens,
        temperature=job.temperature, top_p=job.top_p, seed=job.seed if seed is None else seed,
        job_id=job.job_id if job_id is None else job_id)
    return engine.generate(request, CONTEXT_TOKENS, lambda index, token_id, text: True)


def _request(model_dir: Path, job: Job) -> GenerationRequest:
    return GenerationRequest(model_path=str(model_dir), prompt=job.prompt, max_tokens=job.max_tokens,
                             temperature=job.temperature, top_p=job.top_p, seed=job.seed, job_id=job.job_id)


def run_batched(engine: Engine, model_dir: Path, jobs: list[Job]) -> list[GenerationResult]:
    """Jobs as a node runs them in one continuous batch: the first half starts, the rest join it
    a few steps later (so rows differ in length and padding), each leaves as it ends."""
    batches = Batches(engine, slots=len(jobs))
    keep = JobSink(lambda index, token_id, text: True)
    half = (len(jobs) + 1) // 2
    started = [batches.add(_request(model_dir, job), CONTEXT_TOKENS, keep) for job in jobs[:half]]
    for _ in range(3):
        batches.step()
    started += [batches.add(_request(model_dir, job), CONTEXT_TOKENS, keep) for job in jobs[half:]]
    batches.run_until_idle()
    assert all(job.error is None and job.result is not None for job in started)
    return [job.result for job in started if job.result is not None]


class InABatch:
    """An engine that runs every job in a continuous batch beside `others` varied jobs of its model.

    What a node's batch does to a job, for the cheats and the honest node: the job joins a batch
    already running, so its rows are padded and its shapes are the batch's.
    """

    def __init__(self, engine: Engine, others: int) -> None:
        self.engine, self.others = engine, others
        self._fillers = 0

    def generate(self, request: GenerationRequest, max_context_tokens: int, on_token, *args,  # type: ignore[no-untyped-def]
                 **kwargs) -> GenerationResult:
        assert max_context_tokens == CONTEXT_TOKENS and not args and not kwargs
        self._fillers += 1
        fillers = varied_jobs(self.others, seed=10_000 + self._fillers)
        job = Job(request.job_id, request.prompt, request.max_tokens, request.temperature, request.top_p,
                  request.seed)
        results = run_batched(self.engine, Path(request.model_path), [*fillers[: self.others // 2], job,
                                                                      *fillers[self.others // 2:]])
        return results[self.others // 2]

    def replay(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return self.engine.replay(*args, **kwargs)


@dataclass(frozen=True)
class Outcome:
    caught: bool
    stage: str  # "door" (receipt refused), "replay" (check failed) or "" (passed)
    reasons: tuple[str, ...]
    verdict: CheckVerdict | None = None


class Coordinator:
    """The coordinator's checks for one model, with the real model on a local replayer."""

    def __init__(self, engine: Engine, model_dir: Path, tolerances: Tolerances = DEFAULT_TOLERANCES) -> None:
        self.spec = describe_model(MODEL_ID, model_dir)
        self.model_dir = model_dir
        self.replayer = LocalReplayer(engine, {MODEL_ID: (str(model_dir), self.spec.weights_digest)})
        self.tolerances = tolerances

    def judge(self, job: Job, assigned: Identity, report: Report) -> Outcome:
        expected = ExpectedJob(
            job_id=job.job_id, node_id=assigned.node_id, model_id=MODEL_ID,
            weights_digest=self.spec.weights_digest, prompt=job.prompt,
            temperature=job.temperature, top_p=job.top_p, seed=job.seed,
            max_tokens=job.max_tokens, streamed_token_ids=report.streamed)
        door = check_receipt(report.body, report.signature, assigned.public_key_raw, expected)
        if not door.ok:
            reasons = door.problems if door.signature_ok else ("signature is not the assigned node's",)
            return Outcome(True, "door", tuple(reasons))
        assert door.receipt is not None
        verdict = check_by_replay(self.replayer, door.receipt, job.prompt, report.streamed,
                                  self.tolerances)
        return Outcome(not verdict.passed, "" if verdict.passed else "replay", verdict.reasons, verdict)


class HonestNode:
    def __init__(self, engine: Engine, model_dir: Path, identity: Identity | None = None) -> None:
        self.engine, self.model_dir = engine, model_dir
        self.identity = identity or new_identity()
        self.weights_digest = describe_model(MODEL_ID, model_dir).weights_digest

    def run(self, job: Job) -> tuple[Report, GenerationResult]:
        result = generate(self.engine, self.model_dir, job)
        receipt = receipt_for(job, self.identity, MODEL_ID, self.weights_digest, result)
        return signed(receipt, self.identity, result.token_ids), result


def prefill_commitment(engine: Engine, model_dir: Path, job: Job, tokens: tuple[int, ...]) -> bytes:
    """A commitment for any tokens, made the cheap way: one prefill pass over prompt and tokens.

    What a cheater with the right model can make for output it did not decode.
    """
    replay = engine.replay(str(model_dir), job.prompt, tokens, lambda step, logits: None)
    chunks = tuple(commit_chunk(c, chunk_key(job.job_id, n + 1)) for n, c in enumerate(replay.generated))
    return encode_commitment(ActivationCommitment(commit_chunk(replay.prompt, chunk_key(job.job_id, 0)),
                                                  chunks))


def with_tokens(receipt: Receipt, tokens: tuple[int, ...], **changes: object) -> Receipt:
    """The receipt re-pointed at other output tokens (as a node that edits its output would)."""
    return dataclasses.replace(receipt, output_digest=output_digest(tokens),
                               completion_tokens=len(tokens), **changes)  # type: ignore[arg-type]
