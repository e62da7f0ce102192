"""What nodes report about their jobs: streamed tokens, receipts and failures.

Nothing is credited until the receipt verifies against the job as recorded:
the signer, the model and its weights, the prompt, the sampling, the very tokens
the node streamed and the shape of its proof. Even then the operator's credit is
only held: it is posted when a replay check passes or the check window closes,
and voided (the consumer refunded) when a check fails (coordinator.verification).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.ids import JobId
from contracts.models import VOCAB_SIZE_MAX
from coordinator.errors import AlreadyDone, CoordinatorError, InvalidRequest, NotFound, PermissionDenied
from coordinator.jobs import ending
from coordinator.jobs.receipt_check import ExpectedJob, check_receipt
from coordinator.model import (
    ACTIVE_STATUSES, TERMINAL_STATUSES, JobRecord, JobStatus, NodeRecord, SignedReceipt, TokenChunk,
)
from coordinator.money import job_money
from coordinator.storage import job_rows
from coordinator.verification import outcomes
from coordinator.verification.outcomes import CheckContext
from coordinator.verification.store import CheckStatus

TOKENS_PER_CHUNK_MAX = 4_096
RECEIPT_BYTES_MAX = 1 << 20  # a partial receipt's commitment grows 257 bytes per 32 tokens


def _refuse_unless_active(job_id: str, node: NodeRecord, status: JobStatus | None, assigned: bool,
                          attempt: int = 0, current_attempt: int = 0) -> None:
    """A node reports on a job only while the job is assigned to it and still running, and
    only for the current attempt when it names one (its fencing token)."""
    if status is None:
        raise NotFound(f"job {job_id} does not exist")
    if attempt and attempt != current_attempt:
        raise PermissionDenied(f"attempt {attempt} of job {job_id} is over (the job is at attempt "
                               f"{current_attempt}); drop it")
    if not assigned:
        raise PermissionDenied(f"job {job_id} is not assigned to node {node.node_id}")
    if status in TERMINAL_STATUSES:
        raise AlreadyDone(f"job {job_id} is already {status.value}; its result is recorded")
    if status not in ACTIVE_STATUSES:
        raise PermissionDenied(f"job {job_id} was handed back and is {status.value}")


def _own_active_job(session: Session, node: NodeRecord, job_id: str, attempt: int = 0) -> JobRecord:
    # Locked before the ledger is touched, in the order cancel_job takes them.
    job = job_rows.job_by_id(session, job_id, for_update=True)
    _refuse_unless_active(job_id, node, job.status if job else None,
                          job is not None and node.node_id in job.node_ids, attempt,
                          job.attempt if job else 0)
    assert job is not None
    return job


def _check_streaming(job: job_rows.StreamingJob | None, node: NodeRecord,
                     job_id: str, attempt: int) -> job_rows.StreamingJob:
    """As _own_active_job, over the narrow read the token path makes for every chunk."""
    _refuse_unless_active(job_id, node, job.status if job else None,
                          job is not None and job.assigned_to_node, attempt,
                          job.attempt if job else 0)
    assert job is not None
    return job


def check_token_ids(node: NodeRecord, model_id: str, chunk: TokenChunk) -> None:
    """Every token id (chosen or among the top logprobs) must be a row of the model's
    vocabulary: an id past it would crash the replay that checks the job."""
    spec = node.model(model_id)
    if spec is None:
        raise PermissionDenied(f"node {node.node_id} does not serve {model_id}")
    vocab_size = spec.vocab_size or VOCAB_SIZE_MAX
    ids = [*chunk.token_ids, *(top.token_id for entry in chunk.logprobs for top in entry.top)]
    bad = next((token_id for token_id in ids if not 0 <= token_id < vocab_size), None)
    if bad is not None:
        raise InvalidRequest(f"token id {bad} is outside the vocabulary of {model_id} "
                             f"(ids 0 to {vocab_size - 1}); nothing of this chunk was stored")


def _check_chunk_shape(chunk: TokenChunk) -> None:
    if chunk.first_index < 0 or not chunk.token_ids or len(chunk.token_ids) > TOKENS_PER_CHUNK_MAX:
        raise InvalidRequest(f"a token chunk needs first_index >= 0 and 1 to "
                             f"{TOKENS_PER_CHUNK_MAX} token ids")


def _check_chunk_fits(node: NodeRecord, job_id: str, job: job_rows.StreamingJob, chunk: TokenChunk,
                      stored_tokens: int) -> bool:
    """Whether the chunk is new (it starts where the stored tokens end) or a re-send; raises
    when it cannot be stored (past the stored tokens or max_tokens, ids outside the vocabulary)."""
    check_token_ids(node, job.model_id, chunk)
    if chunk.first_index > stored_tokens:
        raise InvalidRequest(f"token chunk starts at {chunk.first_index} but job {job_id} "
                             f"has {stored_tokens} tokens; send chunks in order")
    if chunk.first_index + len(chunk.token_ids) > job.max_tokens:
        raise InvalidRequest(f"job {job_id} allows at most {job.max_tokens} tokens")
    if chunk.logprobs and len(chunk.logprobs) != len(chunk.token_ids):
        raise InvalidRequest("a token chunk carries one logprob entry per token id, or none")
    return chunk.first_index == stored_tokens  # chunks are contiguous: none starts at the end


def _check_resent(session: Session, job_id: str, chunk: TokenChunk) -> None:
    """A re-sent chunk must keep its original boundaries."""
    if not job_rows.has_chunk_at(session, job_id, chunk.first_index):
        raise InvalidRequest(f"token chunk at {chunk.first_index} overlaps stored tokens of job "
                             f"{job_id}; re-send chunks with their original boundaries")


def _check_partial(partial: SignedReceipt | None) -> None:
    if partial is not None and (len(partial.body) > RECEIPT_BYTES_MAX
                                or len(partial.signature) > RECEIPT_BYTES_MAX):
        raise InvalidRequest(f"a partial receipt is at most {RECEIPT_BYTES_MAX} bytes")


def accept_tokens(session: Session, node: NodeRecord, job_id: str, chunk: TokenChunk,
                  now_ms: int, prompt_tokens: int = 0, partial: SignedReceipt | None = None,
                  attempt: int = 0) -> bool:
    """Store a chunk of a running job; False when it was a harmless re-send.

    prompt_tokens comes with the first chunk. partial, a receipt over the tokens made so
    far, is kept unchecked: it is checked only if the job fails (coordinator.jobs.ending).
    attempt, when named, must be the job's current one. This runs for every chunk a node
    streams, so it reads only what it checks.
    """
    _check_chunk_shape(chunk)
    # Locked: a cancel that ends the job counts every stored token.
    job = _check_streaming(job_rows.lock_streaming_job(session, job_id, node.node_id), node, job_id,
                           attempt)
    new = _check_chunk_fits(node, job_id, job, chunk, job_rows.token_count(session, job_id))
    if job.status is JobStatus.ASSIGNED:
        job_rows.transition_job(session, job_id, frozenset({JobStatus.ASSIGNED}),
                               status=JobStatus.RUNNING, started_at_ms=now_ms,
                               prompt_tokens=max(0, prompt_tokens))
    if partial is not None:
        keep_partial_receipt(session, job_id, partial)
    if new:
        job_rows.insert_chunk(session, job_id, chunk)
        return True
    _check_resent(session, job_id, chunk)
    return False


@dataclass(frozen=True)
class JobTokens:
    """One job's chunk in a node's multiplexed token message (StreamNodeTokens)."""

    job_id: str
    chunk: TokenChunk
    prompt_tokens: int = 0  # on the job's first chunk
    partial: SignedReceipt | None = None
    attempt: int = 0
    cached_prompt_tokens: int = 0  # of the prompt, reused from the node's prompt cache


@dataclass(frozen=True)
class TokenBatch:
    """What accept_token_batch did: the chunks stored (new ones), the re-sends ignored, and the
    jobs whose chunks were refused, each with its error (the others' chunks are stored)."""

    stored: tuple[tuple[str, TokenChunk], ...]
    resent: tuple[str, ...]
    refused: tuple[tuple[str, CoordinatorError], ...]


def accept_token_batch(session: Session, node: NodeRecord, entries: list[JobTokens],
                       now_ms: int) -> TokenBatch:
    """accept_tokens for many jobs' chunks in the caller's one transaction: one locking read
    of every job (with its stored count), one insert of every new chunk.

    A job's chunk that cannot be stored (cancelled, handed back, malformed) refuses that job
    alone, and any later chunk of it in the message; nothing of it is written, and the other
    jobs' chunks are stored as if sent apart."""
    read = job_rows.lock_streaming_jobs(session, sorted({entry.job_id for entry in entries}), node.node_id)
    stored_tokens = {job_id: batch_job.token_count for job_id, batch_job in read.items()}
    statuses = {job_id: batch_job.job.status for job_id, batch_job in read.items()}
    prompts = {job_id: batch_job.prompt_tokens for job_id, batch_job in read.items()}
    stored: list[tuple[str, TokenChunk]] = []
    resent: list[str] = []
    refused: dict[str, CoordinatorError] = {}
    for entry in entries:
        job_id = entry.job_id
        if job_id in refused:
            continue
        try:
            new = _check_entry(session, node, entry, read.get(job_id), stored_tokens.get(job_id, 0),
                               prompts.get(job_id, 0))
        except CoordinatorError as error:
            refused[job_id] = error
            continue
        # Every check passed: now its writes, which cannot fail on its input.
        if _start_or_note(session, entry, statuses[job_id], now_ms):
            statuses[job_id], prompts[job_id] = JobStatus.RUNNING, max(0, entry.prompt_tokens)
        if entry.partial is not None:
            job_rows.save_partial_receipt(session, job_id, entry.partial.body, entry.partial.signature)
        if new:
            stored.append((job_id, entry.chunk))
            stored_tokens[job_id] = entry.chunk.first_index + len(entry.chunk.token_ids)
        else:
            resent.append(job_id)
    job_rows.insert_chunks(session, stored)
    return TokenBatch(tuple(stored), tuple(resent), tuple(refused.items()))


def _check_entry(session: Session, node: NodeRecord, entry: JobTokens, read: job_rows.StreamingBatchJob | None,
                 stored_tokens: int, prompt_tokens: int) -> bool:
    """Every check accept_tokens makes, and the prompt-cache count's: True for a new chunk."""
    _check_chunk_shape(entry.chunk)
    job = _check_streaming(None if read is None else read.job, node, entry.job_id, entry.attempt)
    new = _check_chunk_fits(node, entry.job_id, job, entry.chunk, stored_tokens)
    _check_partial(entry.partial)
    if entry.cached_prompt_tokens:
        prompt = entry.prompt_tokens if job.status is JobStatus.ASSIGNED else prompt_tokens
        if not 0 <= entry.cached_prompt_tokens <= prompt:
            raise InvalidRequest(f"cached_prompt_tokens must be from 0 to the job's {prompt} prompt "
                                 f"tokens; got {entry.cached_prompt_tokens}")
    if not new:
        _check_resent(session, entry.job_id, entry.chunk)
    return new


def _start_or_note(session: Session, entry: JobTokens, status: JobStatus, now_ms: int) -> bool:
    """The job's first chunk starts it (with its prompt's length): True then. A prompt-cache
    count is kept."""
    cached = {"cached_prompt_tokens": entry.cached_prompt_tokens} if entry.cached_prompt_tokens else {}
    if status is JobStatus.ASSIGNED:
        job_rows.transition_job(session, entry.job_id, frozenset({JobStatus.ASSIGNED}),
                               status=JobStatus.RUNNING, started_at_ms=now_ms,
                               prompt_tokens=max(0, entry.prompt_tokens), **cached)
        return True
    if cached:
        job_rows.transition_job(session, entry.job_id, frozenset({status}), **cached)
    return False


def note_cached_prompt(session: Session, node: NodeRecord, job_id: str, cached_prompt_tokens: int,
                       attempt: int = 0) -> None:
    """The node reused this many of the running job's prompt tokens from its prompt cache."""
    job = _own_active_job(session, node, job_id, attempt)
    if not 0 <= cached_prompt_tokens <= job.prompt_tokens:
        raise InvalidRequest(f"cached_prompt_tokens must be from 0 to the job's {job.prompt_tokens} prompt "
                             f"tokens; got {cached_prompt_tokens}")
    job_rows.transition_job(session, job_id, frozenset({job.status}), cached_prompt_tokens=cached_prompt_tokens)


def keep_partial_receipt(session: Session, job_id: str, partial: SignedReceipt) -> None:
    _check_partial(partial)
    job_rows.save_partial_receipt(session, job_id, partial.body, partial.signature)


@dataclass(frozen=True)
class AcceptedResult:
    job_id: JobId
    credited_base_units: int  # held for the operator until the check passes or its window closes
    check_status: CheckStatus = CheckStatus.UNCHECKED
    job: JobRecord | None = None  # the job as it ended: its metrics need no second read
    hold_until_ms: int | None = None  # when the operator's held credit may be released unchecked


def accept_receipt(session: Session, node: NodeRecord, job_id: str, body: bytes,
                   signature: bytes, now_ms: int, context: CheckContext,
                   attempt: int = 0) -> AcceptedResult:
    """Verify the receipt, complete the job, hold the operator's credit and open its check,
    all in the caller's transaction."""
    job = _own_active_job(session, node, job_id, attempt)
    spec = node.model(job.model_id)
    if spec is None:
        raise PermissionDenied(f"node {node.node_id} does not serve {job.model_id}")
    streamed = tuple(t for c in job_rows.token_chunks(session, job_id) for t in c.token_ids)
    expected = ExpectedJob(
        job_id=job.job_id, node_id=node.node_id, model_id=job.model_id,
        weights_digest=spec.weights_digest, prompt=job.prompt, temperature=job.temperature,
        top_p=job.top_p, seed=job.seed, max_tokens=job.max_tokens, streamed_token_ids=streamed)
    verdict = check_receipt(body, signature, node.public_key, expected)
    if not verdict.signature_ok:
        raise PermissionDenied(f"receipt for job {job_id} is not signed by node {node.node_id}'s key")
    if verdict.problems:
        raise InvalidRequest(f"receipt for job {job_id} rejected: " + "; ".join(verdict.problems))
    assert verdict.receipt is not None
    completion = job_money.complete(
        session, job, node.operator_id, spec, verdict.receipt.prompt_tokens,
        verdict.receipt.completion_tokens, hold_s=context.policy.check_window_s)
    price = completion.price
    ended: dict = dict(
        status=JobStatus.COMPLETED, prompt_tokens=verdict.receipt.prompt_tokens,
        completion_tokens=verdict.receipt.completion_tokens, receipt_body=body,
        receipt_signature=signature, receipt_verified=True,
        credited_base_units=price.operator_credit, finished_at_ms=now_ms,
        billing_closed_at_ms=now_ms if completion.billing_closed else None)
    moved = job_rows.transition_job(session, job_id, ACTIVE_STATUSES, **ended)  # the row's one write
    assert moved, "the job was checked active under this transaction"
    job_rows.deactivate_assignments(session, job_id)
    completed = dataclasses.replace(job, **ended)
    check = outcomes.open_check(session, completed, node, spec.weights_digest,
                                price.operator_credit, context, now_ms)
    return AcceptedResult(job.job_id, price.operator_credit, check.status, completed,
                          check.hold_until_ms if price.operator_credit else None)


def accept_failure(session: Session, node: NodeRecord, job_id: str, reason: str,
                   now_ms: int, context: CheckContext, error_code: str | None = None,
                   partial: SignedReceipt | None = None, attempt: int = 0) -> None:
    """The node could not run the job: it fails with the node's reason (jobs.ending settles its
    money, paying for the tokens partial proves)."""
    _own_active_job(session, node, job_id, attempt)
    if partial is not None:
        keep_partial_receipt(session, job_id, partial)
    ending.fail_job(session, job_id, now_ms, error=f"node {node.node_id}: {reason[:1000]}",
                    error_code=error_code, context=context)
    job_rows.deactivate_assignments(session, job_id)
