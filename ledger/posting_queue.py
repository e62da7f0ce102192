"""Job completions queued by receipts, posted by one writer in group commits.

A receipt's transaction writes one row (queue_completion) and takes no ledger lock, so the
receipts of one operator wait neither on each other nor on the chain head. post_queued takes
the chain head, reads the queued rows, applies each job's completion chain (the one
jobs.complete_job applies) in one call, and deletes the rows it applied, all in the caller's
transaction: a crash before its commit leaves the rows queued, after it leaves them posted and
gone, so each is posted exactly once. Transfer ids come from the job: a chain applied twice
would answer `exists` and move nothing.

While queued, a completion is durable (it committed with the receipt) but not in the ledger:
the consumer's reservation still holds the whole maximum charge, so no balance is overstated.
A caller about to read or resolve a job's transfers (release, reject, close, its cost) calls
post_queued for those jobs first. A row the ledger refuses keeps its code and stays for the
audit (`queued_problems`); the others go through.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger.book import lock_ledger
from ledger.job_batches import JOBS_PER_CALL_MAX, JobCompletion, complete_jobs
from ledger.policy import JobPrice
from ledger.storage import queue_store

QUEUE_BATCH_MAX = 500  # jobs a group commit posts; well under JOBS_PER_CALL_MAX
REFUSED_LISTED_MAX = 100
assert QUEUE_BATCH_MAX <= JOBS_PER_CALL_MAX


@dataclass(frozen=True)
class QueuedCompletion:
    """What jobs.complete_job needs, kept until the writer posts it."""

    job_id: JobId
    consumer_id: ConsumerId | None  # None: anonymous, the operator is paid from issuance
    operator_id: OperatorId
    price: JobPrice
    hold_s: int


@dataclass(frozen=True)
class PostedQueue:
    posted: tuple[JobId, ...]  # chains applied (created now, or found already applied)
    refused: tuple[tuple[JobId, str], ...]  # chains the ledger refused, with its code


@dataclass(frozen=True)
class QueueState:
    queued: int  # rows waiting, refused ones included
    refused: int
    oldest_queued_at_us: int | None


def queue_completion(session: Session, completion: QueuedCompletion, *, now_us: int | None = None) -> None:
    """Queue a job's completion in the caller's transaction; no ledger lock is taken."""
    price = completion.price
    queue_store.insert_row(session, {
        "job_id": completion.job_id, "consumer_id": completion.consumer_id,
        "operator_id": completion.operator_id, "consumer_charge": price.consumer_charge,
        "operator_credit": price.operator_credit, "network_fee": price.network_fee,
        "policy_version": price.policy_version, "hold_s": completion.hold_s,
        "queued_at_us": time.time_ns() // 1_000 if now_us is None else now_us, "failed_code": None})


def post_queued(session: Session, job_ids: Iterable[str] | None = None, *, limit: int = QUEUE_BATCH_MAX,
                now_us: int | None = None) -> PostedQueue:
    """Post queued completions in one group commit: these jobs' (job_ids), or the `limit` oldest.

    Takes the ledger's write lock first, then reads the rows: every poster holds that lock,
    so a row is read by one poster at a time, and a waiting poster sees the rows the one
    before it deleted."""
    assert 0 < limit <= QUEUE_BATCH_MAX
    wanted = None if job_ids is None else sorted(set(job_ids))
    if wanted == []:
        return PostedQueue((), ())
    lock_ledger(session)
    rows = queue_store.queued_rows(session, wanted, limit)
    if not rows:
        return PostedQueue((), ())
    by_hold: dict[int, list[JobCompletion]] = {}
    for job_id, consumer_id, operator_id, charge, credit, fee, policy_version, hold_s, _ in rows:
        price = JobPrice(int(charge), int(credit), int(fee), policy_version)
        by_hold.setdefault(int(hold_s), []).append(JobCompletion(
            JobId(job_id), None if consumer_id is None else ConsumerId(consumer_id), OperatorId(operator_id), price))
    posted: list[JobId] = []
    refused: list[tuple[JobId, str]] = []
    for hold_s, completions in by_hold.items():
        for start in range(0, len(completions), QUEUE_BATCH_MAX):
            batch = completions[start:start + QUEUE_BATCH_MAX]
            for completion, payment in zip(batch, complete_jobs(session, batch, hold_s=hold_s, now_us=now_us),
                                           strict=True):
                failure = payment.failure
                if failure is None:
                    posted.append(completion.job_id)
                else:
                    refused.append((completion.job_id, str(failure.code)))
    queue_store.delete_rows(session, posted)
    queue_store.refuse_rows(session, refused)
    return PostedQueue(tuple(posted), tuple(refused))


def queue_state(session: Session) -> QueueState:
    return QueueState(*queue_store.counts(session))


def queued_problems(session: Session) -> list[tuple[str, str]]:
    """Queued completions the ledger refused: (job id, its code), for the audit."""
    return queue_store.refused_rows(session, REFUSED_LISTED_MAX)
