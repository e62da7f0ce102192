"""The job-payment flow for many jobs at once: one ledger call per phase instead of one per job.

Each job's transfers form one linked chain (ledger.book.create_transfer_chains), so a job
whose step fails (short balance, no such reservation, already resolved) writes nothing
and answers with its own code, while the other jobs of the call still go through. Each
function gives the results, rows and hashes of calling its one-job twin in ledger.jobs
for each job in order, at the same time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger.book import JobStep, accounts_exist, create_transfer_chains, existing_transfer_ids, job_transfer_id
from ledger.jobs import (
    SYSTEM_ACCOUNTS,
    JobPayment,
    completion_operations,
    credits_operator,
    ensure_system_accounts,
    open_operator_account,
    operator_account_id,
    release_operation,
    reservation_request,
)
from ledger.model import OPERATIONS_PER_CALL_MAX, AccountKind, Operation, ResultCode, TransferResult
from ledger.policy import JobPrice

JOBS_PER_CALL_MAX = OPERATIONS_PER_CALL_MAX // 3  # a completion writes up to three transfers


@dataclass(frozen=True)
class JobReservation:
    job_id: JobId
    consumer_id: ConsumerId
    amount: int  # policy.max_job_charge
    timeout_s: int = 0

    # Written out like ledger.model.TransferRequest's: the generated frozen __init__ sets each
    # field through object.__setattr__ (about 2 us), and a caller builds one a job.
    def __init__(self, job_id: JobId, consumer_id: ConsumerId, amount: int, timeout_s: int = 0) -> None:
        object.__setattr__(self, "__dict__", {
            "job_id": job_id, "consumer_id": consumer_id, "amount": amount, "timeout_s": timeout_s,
        })


@dataclass(frozen=True)
class JobCompletion:
    job_id: JobId
    consumer_id: ConsumerId | None  # None: anonymous, the operator is paid from issuance
    operator_id: OperatorId
    price: JobPrice

    # Written out like JobReservation's.
    def __init__(self, job_id: JobId, consumer_id: ConsumerId | None, operator_id: OperatorId,
                 price: JobPrice) -> None:
        object.__setattr__(self, "__dict__", {
            "job_id": job_id, "consumer_id": consumer_id, "operator_id": operator_id, "price": price,
        })


def reserve_jobs(
    session: Session, reservations: Sequence[JobReservation], *, now_us: int | None = None
) -> tuple[TransferResult, ...]:
    """jobs.reserve_job for each reservation, in one call: one result per reservation."""
    assert len(reservations) <= JOBS_PER_CALL_MAX, f"at most {JOBS_PER_CALL_MAX} jobs per call"
    if not reservations:
        return ()
    ensure_system_accounts(session)
    chains = [[reservation_request(r.job_id, r.consumer_id, r.amount, r.timeout_s)] for r in reservations]
    return tuple(results[0] for results in create_transfer_chains(session, chains, now_us=now_us))


def complete_jobs(
    session: Session, completions: Sequence[JobCompletion], *, hold_s: int, now_us: int | None = None
) -> tuple[JobPayment, ...]:
    """jobs.complete_job for each completion, in one call: one JobPayment per completion."""
    assert len(completions) <= JOBS_PER_CALL_MAX, f"at most {JOBS_PER_CALL_MAX} jobs per call"
    chains = [
        completion_operations(c.job_id, c.consumer_id, c.operator_id, c.price, hold_s) for c in completions
    ]
    if not completions:
        return ()
    paid = sorted({c.operator_id for c, chain in zip(completions, chains, strict=True) if credits_operator(chain)})
    # One read answers when every account exists, as it does after an operator's first job.
    wanted = [*SYSTEM_ACCOUNTS, *((operator_account_id(operator_id), AccountKind.OPERATOR) for operator_id in paid)]
    if not accounts_exist(session, wanted):
        ensure_system_accounts(session)
        for operator_id in paid:
            open_operator_account(session, operator_id)
    return _payments(session, chains, now_us)


def release_job_credits(
    session: Session, job_ids: Sequence[JobId], *, now_us: int | None = None
) -> tuple[JobPayment, ...]:
    """jobs.release_job_credit for each job, in one call: no results for a job that holds no credit.

    Every job's release goes into the call, and the read under the write lock tells which
    credits exist: a release whose credit is missing answers pending_transfer_not_found
    and writes nothing, which is the one-job twin's "no credit held". So there is no
    separate read of the credit ids first (a round trip and 500 index probes a batch).
    """
    assert len(job_ids) <= JOBS_PER_CALL_MAX, f"at most {JOBS_PER_CALL_MAX} jobs per call"
    if not job_ids:
        return ()
    results = create_transfer_chains(session, [[release_operation(job_id)] for job_id in job_ids], now_us=now_us)
    if results[0][0].code is ResultCode.EPOCH_CLOSED:
        # Refused before any credit was looked at (the time falls in a closed epoch): only
        # the jobs that hold a credit answer with the code, as their one-job twins do.
        held = existing_transfer_ids(session, [job_transfer_id(job_id, JobStep.CREDIT) for job_id in job_ids])
        return tuple(JobPayment(chain) if job_transfer_id(job_id, JobStep.CREDIT) in held else JobPayment(())
                     for job_id, chain in zip(job_ids, results, strict=True))
    not_found = ResultCode.PENDING_TRANSFER_NOT_FOUND
    return tuple(JobPayment(()) if chain[0].code is not_found else JobPayment(chain) for chain in results)


def _payments(session: Session, chains: Sequence[list[Operation]], now_us: int | None) -> tuple[JobPayment, ...]:
    """Apply the non-empty chains in one call; an empty chain is a job with nothing to write."""
    written = [chain for chain in chains if chain]
    results = iter(create_transfer_chains(session, written, now_us=now_us) if written else ())
    return tuple(JobPayment(next(results)) if chain else JobPayment(()) for chain in chains)
