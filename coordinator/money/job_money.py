"""A job's money, one path: reserve at submit, charge and hold at completion, settle a failure,
post or void the held credit, and read what it cost.

- Submit: a job submitted with an API key reserves the most it can cost, counted against the
  key's spend limit; too small a balance refuses the job and the caller rolls back. Anonymous
  jobs reserve nothing: the network pays.
- Completed with a verified receipt: the consumer is charged and the operator's credit held
  until its check passes or its window closes (`complete`).
- Failed or cancelled: charged only for tokens both delivered to the consumer and proven by a
  verified partial receipt, the operator's credit held as for a completion; with no such tokens
  the reservation is released whole and nobody is paid (`settle_failed`). No credit is ever
  written without a verified receipt, so `mlxnet ledger audit` holds after any fault.
- A check decides the held credit: posted (`release_credit`) or voided, the consumer refunded
  (`reject_credit`). A failed check also takes the node's stake: other held credits voided the
  same way, and posted ones clawed back (`claw_back`), a debt where the balance falls short,
  which the operator's next posted credits repay first (`repay_debts`).

Every job with a reservation is closed once: `billing_closed_at_ms` is set, in the same write of
the job's row that ends it, when its reservation is resolved and the key's spend corrected to the
actual charge (coordinator.jobs.ending). Jobs the scheduler fails as unplaceable are closed by
`close_job` or the sweep (`close_ended_jobs`). This module computes and moves the money;
callers write the job's row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from contracts.models import ModelSpec
from coordinator.errors import InsufficientBalance
from coordinator.model import PROMPT_TEXT, JobRecord, JobStatus
from coordinator.money import api_keys
from coordinator.storage import job_rows
from coordinator.storage.database import writes_serialized
from ledger.api import (
    JOBS_PER_CALL_MAX,
    JobPayment,
    JobPrice,
    JobStep,
    ResultCode,
    TransferKind,
    TransferState,
    PostedQueue,
    QueuedCompletion,
    balance,
    claw_back as ledger_claw_back,
    complete_job,
    consumer_account_id,
    get_transfer,
    job_transfer_id,
    lock_ledger,
    max_job_charge,
    pending_state,
    post_queued,
    price_job,
    queue_completion,
    reject_job_credit,
    release_job_credit,
    release_job_credits,
    repay_debt,
    reserve_job,
    transfers_for_job,
    void_job,
)

log = logging.getLogger(__name__)

# Tokens a tokenizer may add around a plain prompt (BOS, a leading space): UTF-8 bytes
# bound the rest from above for byte-level and byte-fallback tokenizers.
SPECIAL_TOKENS_MAX = 8
COMPLETED_CLOSE_WINDOW_MS = 3_600_000  # completed jobs the sweep still waits on
SWEEP_JOBS_MAX = 100
CREDITS_RELEASED_PER_CALL_MAX = JOBS_PER_CALL_MAX  # the ledger's batch limit


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


def max_charge(job: JobRecord, spec: ModelSpec) -> int:
    """What a keyed submit reserves: the job's price at its largest prompt and max_tokens."""
    return max_job_charge(spec.parameter_count, prompt_tokens_bound(job, spec), job.max_tokens)


def consumer_balance(session: Session, consumer_id: str) -> int:
    """Base units the consumer can still reserve (0 without an account)."""
    found = balance(session, consumer_account_id(ConsumerId(consumer_id)))
    return 0 if found is None else found.available


def lock_before_key(session: Session) -> None:
    """The ledger's write lock, taken before a submit locks its API key's row.

    Closing a job takes the ledger first and then corrects its key's spend, so a submit that
    locked the key first and then reserved deadlocked with it on PostgreSQL. On SQLite the
    transaction already holds the one write lock: no order to keep.
    """
    if writes_serialized(session):
        return
    lock_ledger(session)


def reserve(session: Session, job: JobRecord, key: api_keys.ApiKey) -> None:
    """Reserve job.reserved_base_units (from max_charge) in the ledger and against the key's spend.

    InsufficientBalance writes nothing the caller keeps: it rolls the submit back.
    """
    amount = job.reserved_base_units
    assert amount > 0, "a free job reserves nothing"
    api_keys.add_spend(session, key.key_id, amount)
    result = reserve_job(session, job.job_id, ConsumerId(job.consumer_id), amount)
    if result.code in (ResultCode.DEBIT_ACCOUNT_NOT_FOUND, ResultCode.EXCEEDS_CREDITS):
        available = consumer_balance(session, job.consumer_id)
        raise InsufficientBalance(
            f"this job could cost up to {amount} base units and consumer {job.consumer_id!r} has "
            f"{available} available; deposit more (`mlxnet keys deposit`) or lower max_tokens")
    assert result.ok, f"ledger refused the reservation for {job.job_id}: {result.code}"


@dataclass(frozen=True)
class Completion:
    price: JobPrice
    billing_closed: bool  # the reservation was resolved now: the job's row records it in its end


def complete(session: Session, job: JobRecord, operator_id: OperatorId, spec: ModelSpec,
             prompt_tokens: int, completion_tokens: int, hold_s: int) -> Completion:
    """Charge the consumer for a verified receipt and hold the operator's credit; the key's
    spend forgets the part of the reservation that was not charged.

    The ledger's part is queued in this transaction (ledger.posting_queue) and posted by the
    postings loop in a group commit: a receipt takes no ledger lock. The caller moves the job
    out of its active state in this same transaction, so a job is queued at most once."""
    price = chargeable_price(job, spec, prompt_tokens, completion_tokens)
    queue_completion(session, QueuedCompletion(job.job_id, paying_consumer(job), operator_id, price, hold_s))
    if job.reserved_base_units == 0:
        return Completion(price, billing_closed=False)
    # The queued chain posts exactly the charge (or voids the reservation for a zero charge).
    _refund_unspent(session, job, price.consumer_charge)
    return Completion(price, billing_closed=True)


def post_completions(session: Session, job_ids: list[str] | None = None) -> PostedQueue:
    """Post queued completions: these jobs', or the oldest batch. A refused one is a ledger
    fault, kept in the queue for the audit; the others go through."""
    posted = post_queued(session, job_ids)
    for job_id, code in posted.refused:
        log.error("ledger refused the queued completion of %s: %s (kept for the audit)", job_id, code)
    return posted


@dataclass(frozen=True)
class ProvenWork:
    """What a failed job delivered and a verified partial receipt proves: the tokens it may
    charge (coordinator.jobs.ending counts them; never more than the consumer received)."""

    operator_id: OperatorId
    spec: ModelSpec
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Settlement:
    price: JobPrice | None  # charged and credited (the credit held), None when nothing was
    billing_closed: bool  # the reservation was resolved now: the job's row records it in its end


def settle_failed(session: Session, job: JobRecord, proven: ProvenWork | None,
                  hold_s: int) -> Settlement:
    """A failed or cancelled job: charge its delivered and proven tokens and hold the operator's
    credit for its check, as a completion does; without proof, release the reservation whole
    and pay nobody. billing_closed: it had a reservation, resolved now (the caller records
    billing_closed_at_ms in the same write that fails the job)."""
    price = None
    if proven is not None and proven.completion_tokens > 0:
        price = chargeable_price(job, proven.spec, proven.prompt_tokens, proven.completion_tokens)
        payment = complete_job(session, job.job_id, paying_consumer(job),
                                           proven.operator_id, price, hold_s=hold_s)
        assert payment.ok, f"ledger refused to settle {job.job_id}'s proven tokens: {payment.failure}"
    if job.reserved_base_units == 0:
        return Settlement(price, billing_closed=False)
    charged = _posted_charge(session, job.job_id) if price is not None else _void(session, job)
    _refund_unspent(session, job, charged)
    return Settlement(price, billing_closed=True)


def close_job(session: Session, job: JobRecord, now_ms: int) -> bool:
    """Resolve an ended job's reservation left open (the scheduler failed it as unplaceable, or
    a crash came between its end and its close) and correct its key's spend; False if not yet."""
    if job.reserved_base_units == 0 or job.billing_closed_at_ms is not None:
        return False
    post_completions(session, [job.job_id])
    if job.status is JobStatus.FAILED:
        charged = _void(session, job)  # a failed job's proven tokens were charged as it failed
    elif job.status is JobStatus.COMPLETED and pending_state(
            session, job_transfer_id(job.job_id, JobStep.RESERVE)) not in (None, TransferState.PENDING):
        charged = _posted_charge(session, job.job_id)  # the completion path charged it
    else:
        return False
    # Compare-and-set, so two coordinators sweeping together correct the spend once.
    closed = job_rows.close_billing(session, job.job_id, now_ms)
    if closed:
        _refund_unspent(session, job, charged)
    return closed


def close_ended_jobs(session: Session, now_ms: int) -> list[JobId]:
    """The sweep: close_job over the ended jobs whose reservation is still open."""
    closed = []
    for job_id in job_rows.jobs_with_open_billing(
            session, now_ms - COMPLETED_CLOSE_WINDOW_MS, SWEEP_JOBS_MAX):
        job = job_rows.job_by_id(session, job_id)
        if job is not None and close_job(session, job, now_ms):
            closed.append(job.job_id)
    return closed


def release_credit(session: Session, job_id: str) -> JobPayment:
    """Post the operator's held credit: its check passed, or its window closed unchecked."""
    post_completions(session, [job_id])
    return release_job_credit(session, JobId(job_id))


def release_credits(session: Session, job_ids: list[str]) -> list[JobPayment]:
    """release_credit for many jobs in one ledger call: one lock, one read, one write. Their
    completions still queued are posted first, so each held credit exists when it is released."""
    post_completions(session, job_ids)
    return release_job_credits(session, [JobId(job_id) for job_id in job_ids])


def reject_credit(session: Session, job_id: str) -> JobPayment:
    """Void the held credit of a job that failed its check, refunding the consumer in full;
    its key's spend forgets the charge too."""
    post_completions(session, [job_id])  # a credit still queued would be held after its void
    payment = reject_job_credit(session, JobId(job_id))
    if not payment.ok:
        return payment
    job = job_rows.job_by_id(session, job_id)
    charge = get_transfer(session, job_transfer_id(JobId(job_id), JobStep.POST))
    if job is not None and job.api_key_id and job.billing_closed_at_ms is not None and charge:
        api_keys.refund_spend(session, job.api_key_id, charge.amount)
    return payment


def claw_back(session: Session, operator_id: str, failed_job_id: str, amount: int) -> tuple[int, int]:
    """Take back `amount` of what was posted to the operator, after its node failed the check of
    failed_job_id: (taken from its balance, left as a debt)."""
    post_completions(session, [failed_job_id])
    taken = ledger_claw_back(session, OperatorId(operator_id), f"clawback:{failed_job_id}", amount)
    return taken.taken, taken.owed


def repay_debts(session: Session, released: list[tuple[str, str]]) -> int:
    """After credits were posted: each operator's claw-back debt is repaid from them first.
    released: (operator id, job id whose credit was posted), the job naming the repayment."""
    repaid = 0
    for operator_id, job_id in dict(released).items():  # once per operator, named by its last job
        repaid += repay_debt(session, OperatorId(operator_id), f"debt-repaid:{job_id}")
    return repaid


def _refund_unspent(session: Session, job: JobRecord, charged: int) -> None:
    if job.api_key_id is not None:
        api_keys.refund_spend(session, job.api_key_id, job.reserved_base_units - charged)


def _void(session: Session, job: JobRecord) -> int:
    """Release a failed job's reservation whole, unless it was already resolved; returns what
    the consumer was charged."""
    result = void_job(session, job.job_id)
    assert result.code in (ResultCode.CREATED, ResultCode.EXISTS,
                           ResultCode.PENDING_ALREADY_RESOLVED), result.code
    return _posted_charge(session, job.job_id)


def _posted_charge(session: Session, job_id: JobId) -> int:
    post = get_transfer(session, job_transfer_id(job_id, JobStep.POST))
    return 0 if post is None else post.amount


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
    post_completions(session, [job.job_id])  # the caller's transaction writes: the cost is the ledger's
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
