"""The consumer's side of a job's payment: reserve at submit, close when the job ends.

- Submit: a job submitted with an API key reserves the most it can cost
  (ledger.jobs.reserve_job) in the submit transaction; too small a balance refuses
  the job and nothing is written. Anonymous jobs reserve nothing: the network pays.
- Completed with a verified receipt: the completion path charges it
  (ledger.jobs.complete_job with `paying_consumer(job)` and `chargeable_price`).
- Failed or cancelled: closed here, charged for the tokens it streamed and no more
  (ledger.jobs.settle_job), or released whole when it streamed none (void_job).

Every job with a reservation is closed once: `billing_closed_at_ms` is set when its
reservation is resolved and the key's spend corrected to the actual charge. A sweep
(`close_ended_jobs`) catches jobs failed anywhere in the coordinator.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from contracts.models import ModelSpec
from coordinator.errors import InsufficientBalance
from coordinator.model import PROMPT_TEXT, JobRecord, JobStatus
from coordinator.money import api_keys
from coordinator.storage import job_rows, node_rows
from coordinator.storage.database import writes_serialized
from coordinator.storage.tables import jobs
from ledger import jobs as ledger_jobs
from ledger.book import (
    JobStep,
    balance,
    get_transfer,
    job_transfer_id,
    lock_ledger,
    pending_state,
    transfers_for_job,
)
from ledger.model import ResultCode, TransferKind, TransferState
from ledger.policy import JobPrice, max_job_charge, price_job

log = logging.getLogger(__name__)

# Tokens a tokenizer may add around a plain prompt (BOS, a leading space): UTF-8 bytes
# bound the rest from above for byte-level and byte-fallback tokenizers.
SPECIAL_TOKENS_MAX = 8
COMPLETED_CLOSE_WINDOW_MS = 3_600_000  # completed jobs the sweep still waits on
SWEEP_JOBS_MAX = 100


def prompt_tokens_bound(job: JobRecord, spec: ModelSpec) -> int:
    """The most prompt tokens the node can charge: it refuses prompts over the context.

    A chat prompt's template adds tokens no coordinator can count without the
    tokenizer, so it is bounded by the context alone.
    """
    room = max(0, spec.max_context_tokens - job.max_tokens)
    if job.prompt_format == PROMPT_TEXT:
        return min(room, len(job.prompt.encode()) + SPECIAL_TOKENS_MAX)
    return room


def chargeable_price(job: JobRecord, spec: ModelSpec, prompt_tokens: int,
                     completion_tokens: int) -> JobPrice:
    """The job's price with counts clamped to what was reserved, so a charge always fits."""
    return price_job(spec.parameter_count, min(prompt_tokens, prompt_tokens_bound(job, spec)),
                     min(completion_tokens, job.max_tokens))


def paying_consumer(job: JobRecord) -> ConsumerId | None:
    """The consumer whose reservation pays for the job; None when the network pays."""
    return ConsumerId(job.consumer_id) if job.reserved_base_units > 0 else None


def consumer_balance(session: Session, consumer_id: str) -> int:
    """Base units the consumer can still reserve (0 without an account)."""
    found = balance(session, ledger_jobs.consumer_account_id(ConsumerId(consumer_id)))
    return 0 if found is None else found.available


def lock_before_key(session: Session) -> None:
    """The ledger's write lock, taken before a submit locks its API key's row.

    Closing a job takes the ledger first and then corrects its key's spend (refund_spend),
    so a submit that locked the key first and then reserved deadlocked with it on PostgreSQL.
    On SQLite the transaction already holds the one write lock: no order to keep, and the
    reservation's own lock follows anyway.
    """
    if writes_serialized(session):
        return
    lock_ledger(session)


def reserve(session: Session, job: JobRecord, spec: ModelSpec, key: api_keys.ApiKey) -> int:
    """Reserve the job's maximum charge; InsufficientBalance writes nothing (the caller rolls back)."""
    amount = max_job_charge(spec.parameter_count, prompt_tokens_bound(job, spec), job.max_tokens)
    if amount == 0:
        return 0  # a free job needs no reservation
    api_keys.add_spend(session, key.key_id, amount)
    result = ledger_jobs.reserve_job(session, job.job_id, ConsumerId(job.consumer_id), amount)
    if result.code in (ResultCode.DEBIT_ACCOUNT_NOT_FOUND, ResultCode.EXCEEDS_CREDITS):
        available = consumer_balance(session, job.consumer_id)
        raise InsufficientBalance(
            f"this job could cost up to {amount} base units and consumer {job.consumer_id!r} has "
            f"{available} available; deposit more (`mlxnet keys deposit`) or lower max_tokens")
    assert result.ok, f"ledger refused the reservation for {job.job_id}: {result.code}"
    moved = job_rows.transition_job(session, job.job_id, frozenset({JobStatus.QUEUED}),
                                   reserved_base_units=amount)
    assert moved, "the job was inserted as queued in this transaction"
    return amount


def _streamed_charge(session: Session, job: JobRecord) -> tuple[OperatorId, JobPrice] | None:
    """Who ran the job and the price of the tokens it streamed, or None when it streamed none."""
    streamed = job_rows.token_count(session, job.job_id)
    node = node_rows.node_by_id(session, job.node_ids[0]) if job.node_ids else None
    spec = node.model(job.model_id) if node is not None else None
    if streamed == 0 or node is None or spec is None:
        return None
    return node.operator_id, chargeable_price(job, spec, job.prompt_tokens, streamed)


def _close_failed(session: Session, job: JobRecord) -> int:
    """Charge the streamed tokens of a failed job, or release it; returns the charge."""
    charge = _streamed_charge(session, job)
    consumer = ConsumerId(job.consumer_id)
    if charge is not None and charge[1].consumer_charge > 0:
        operator_id, price = charge
        payment = ledger_jobs.settle_job(session, job.job_id, consumer, operator_id, price)
        if payment.ok:
            return price.consumer_charge
        log.warning("job %s: charging its streamed tokens failed (%s); releasing it instead",
                    job.job_id, payment.failure)
    result = ledger_jobs.void_job(session, job.job_id)
    assert result.code in (ResultCode.CREATED, ResultCode.EXISTS,
                           ResultCode.PENDING_ALREADY_RESOLVED), result.code
    return _posted_charge(session, job.job_id)


def _posted_charge(session: Session, job_id: JobId) -> int:
    post = get_transfer(session, job_transfer_id(job_id, JobStep.POST))
    return 0 if post is None else post.amount


def close_job(session: Session, job: JobRecord, now_ms: int) -> bool:
    """Resolve an ended job's reservation once and correct its key's spend; False if not yet."""
    if job.reserved_base_units == 0 or job.billing_closed_at_ms is not None:
        return False
    reserve_id = job_transfer_id(job.job_id, JobStep.RESERVE)
    if job.status is JobStatus.FAILED:
        charged = _close_failed(session, job)
    elif job.status is JobStatus.COMPLETED and pending_state(session, reserve_id) not in (
            None, TransferState.PENDING):
        charged = _posted_charge(session, job.job_id)  # the completion path charged it
    else:
        return False
    # Compare-and-set, so two coordinators sweeping together correct the spend once.
    moved = session.execute(update(jobs).where(
        jobs.c.job_id == job.job_id, jobs.c.billing_closed_at_ms.is_(None))
        .values(billing_closed_at_ms=now_ms)).rowcount == 1
    if moved and job.api_key_id is not None:
        api_keys.refund_spend(session, job.api_key_id, job.reserved_base_units - charged)
    return moved


def close_ended_jobs(session: Session, now_ms: int) -> list[JobId]:
    """The sweep: close failed jobs' reservations and count completed jobs' charges."""
    open_billing = (jobs.c.reserved_base_units > 0) & jobs.c.billing_closed_at_ms.is_(None)
    failed = select(jobs.c.job_id).where(open_billing, jobs.c.status == JobStatus.FAILED.value)
    completed = select(jobs.c.job_id).where(
        open_billing, jobs.c.status == JobStatus.COMPLETED.value,
        jobs.c.finished_at_ms > now_ms - COMPLETED_CLOSE_WINDOW_MS)
    closed = []
    for query in (failed, completed):
        for job_id in session.execute(query.order_by(jobs.c.job_id).limit(SWEEP_JOBS_MAX)).scalars():
            job = job_rows.job_by_id(session, job_id)
            if job is not None and close_job(session, job, now_ms):
                closed.append(job.job_id)
    return closed


@dataclass(frozen=True)
class JobCost:
    """A job's money so far, from the ledger (base units)."""

    reserved: int
    charged: int  # the consumer's charge, after any refund
    operator_credit: int
    operator_credit_state: str  # pending (held until verified), posted, voided, or "" for none
    network_fee: int
    refunded: int
    paid_by: str  # "consumer" or "network"


def job_cost(session: Session, job: JobRecord) -> JobCost:
    transfers = transfers_for_job(session, job.job_id)
    credit = get_transfer(session, job_transfer_id(job.job_id, JobStep.CREDIT))
    credit_state = ""
    if credit is not None:
        resolved = pending_state(session, credit.id)
        credit_state = (resolved or credit.state).value
    refunded = sum(t.amount for t in transfers if t.kind is TransferKind.JOB_REFUND)
    fee = get_transfer(session, job_transfer_id(job.job_id, JobStep.FEE))
    fee_refund = get_transfer(session, job_transfer_id(job.job_id, JobStep.FEE_REFUND))
    return JobCost(
        reserved=job.reserved_base_units, charged=_posted_charge(session, job.job_id) - refunded,
        operator_credit=0 if credit is None else credit.amount,
        operator_credit_state=credit_state,
        network_fee=(0 if fee is None else fee.amount) - (0 if fee_refund is None else fee_refund.amount),
        refunded=refunded, paid_by="consumer" if job.reserved_base_units > 0 else "network")
