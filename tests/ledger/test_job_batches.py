"""ledger.job_batches: many jobs per ledger call write exactly what one call per job writes.

Each scenario runs twice in the same database state (the first run in a savepoint that
is rolled back): once job by job through ledger.jobs, once through the batched twins.
Results, stored transfers (hashes included), balances and the chain head must agree.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger import epochs, jobs
from ledger.job_batches import JobCompletion, JobReservation, complete_jobs, release_job_credits, reserve_jobs
from ledger.model import ResultCode
from ledger.policy import max_job_charge, price_job
from tests.ledger.helpers import NOW_US, transfer_count
from tests.ledger.test_chains import journal

PARAMETERS = 8 * 10**9
RESERVE = max_job_charge(PARAMETERS, 500, 256)
RICH, POOR = ConsumerId("rich"), ConsumerId("poor")
OPERATORS = (OperatorId("op-1"), OperatorId("op-2"))
HOLD_S = 600


def fund(session: Session) -> None:
    for consumer, amount in ((RICH, 20 * RESERVE), (POOR, RESERVE + RESERVE // 2)):
        jobs.open_consumer_account(session, consumer)
        assert jobs.deposit_for_consumer(session, f"deposit-{consumer}", consumer, amount, now_us=NOW_US).ok


def scenario() -> tuple[list[JobReservation], list[JobCompletion], list[JobId]]:
    """Reservations (the poor consumer runs out at its second), completions and releases, with edge cases."""
    reservations = [JobReservation(JobId(f"job-{index}"), RICH if index % 3 else POOR, RESERVE) for index in range(9)]
    reservations.append(reservations[0])  # a retry inside the same call
    completions = [
        JobCompletion(r.job_id, r.consumer_id, OPERATORS[index % 2], price_job(PARAMETERS, 500, 10 * index))
        for index, r in enumerate(reservations[:9])
    ]  # job-0 charges nothing (a void); job-3, job-6 were never reserved (the poor consumer ran short)
    completions.append(JobCompletion(JobId("anonymous-1"), None, OPERATORS[0], price_job(PARAMETERS, 500, 40)))
    completions.append(JobCompletion(JobId("never-reserved"), RICH, OPERATORS[1], price_job(PARAMETERS, 500, 40)))
    released = [c.job_id for c in completions] + [JobId("job-1"), JobId("no-such-job")]
    return reservations, completions, released


def test_batched_job_payments_equal_one_call_per_job(session: Session) -> None:
    fund(session)
    reservations, completions, released = scenario()
    one_job_each = session.begin_nested()
    singles = (
        tuple(jobs.reserve_job(session, r.job_id, r.consumer_id, r.amount, now_us=NOW_US + 1) for r in reservations),
        tuple(jobs.complete_job(session, c.job_id, c.consumer_id, c.operator_id, c.price, hold_s=HOLD_S,
                                now_us=NOW_US + 2) for c in completions),
        tuple(jobs.release_job_credit(session, job_id, now_us=NOW_US + 3) for job_id in released),
    )
    written_job_by_job = journal(session)
    one_job_each.rollback()
    batched = (
        reserve_jobs(session, reservations, now_us=NOW_US + 1),
        complete_jobs(session, completions, hold_s=HOLD_S, now_us=NOW_US + 2),
        release_job_credits(session, released, now_us=NOW_US + 3),
    )
    assert batched == singles
    assert journal(session) == written_job_by_job
    reserve_codes = [result.code for result in batched[0]]
    assert reserve_codes.count(ResultCode.EXCEEDS_CREDITS) == 2 and reserve_codes[-1] is ResultCode.EXISTS
    failures = {payment.failure.code for payment in batched[1] if payment.failure is not None}
    assert failures == {ResultCode.PENDING_TRANSFER_NOT_FOUND}  # the jobs never reserved, and only those
    assert batched[2][-1].results == ()  # no credit held: nothing to release


def test_a_retried_batch_moves_nothing(session: Session) -> None:
    fund(session)
    reservations, completions, released = scenario()
    reserved = reserve_jobs(session, reservations, now_us=NOW_US + 1)
    completed = complete_jobs(session, completions, hold_s=HOLD_S, now_us=NOW_US + 2)
    paid = release_job_credits(session, released, now_us=NOW_US + 3)
    # Retry what was written (a step refused the first time may rightly succeed later).
    reservations = [r for r, result in zip(reservations, reserved, strict=True) if result.ok]
    completions = [c for c, payment in zip(completions, completed, strict=True) if payment.ok and payment.results]
    released = [job_id for job_id, payment in zip(released, paid, strict=True) if payment.ok and payment.results]
    count = transfer_count(session)
    written = journal(session)
    again = (
        reserve_jobs(session, reservations, now_us=NOW_US + 4),
        complete_jobs(session, completions, hold_s=HOLD_S, now_us=NOW_US + 5),
        release_job_credits(session, released, now_us=NOW_US + 6),
    )
    assert transfer_count(session) == count and journal(session) == written
    codes = [result.code for result in again[0]]
    codes += [result.code for payments in again[1:] for payment in payments for result in payment.results]
    assert len(codes) > len(released) and set(codes) == {ResultCode.EXISTS}


def test_releases_without_a_held_credit_answer_nothing_beside_those_with_one(session: Session) -> None:
    fund(session)
    held = [JobId(f"held-{index}") for index in range(4)]
    assert all(r.ok for r in reserve_jobs(session, [JobReservation(j, RICH, RESERVE) for j in held], now_us=NOW_US))
    price = price_job(PARAMETERS, 500, 40)
    completions = [JobCompletion(job_id, RICH, OPERATORS[0], price) for job_id in held]
    assert all(p.ok for p in complete_jobs(session, completions, hold_s=HOLD_S, now_us=NOW_US + 1))
    # Interleaved: jobs that hold a credit, jobs never paid, and a job whose credit is already posted.
    assert jobs.release_job_credit(session, held[1], now_us=NOW_US + 2).ok
    released = [held[0], JobId("nothing-1"), held[1], held[2], JobId("nothing-2"), held[3]]
    one_job_each = session.begin_nested()
    singles = tuple(jobs.release_job_credit(session, job_id, now_us=NOW_US + 3) for job_id in released)
    written_job_by_job = journal(session)
    one_job_each.rollback()
    batched = release_job_credits(session, released, now_us=NOW_US + 3)
    assert batched == singles and journal(session) == written_job_by_job
    assert [len(payment.results) for payment in batched] == [1, 0, 1, 1, 0, 1]
    assert batched[2].results[0].code is ResultCode.EXISTS


def test_releases_in_a_closed_epoch_answer_like_their_one_job_twins(session: Session) -> None:
    fund(session)
    job_id = JobId("held-late")
    assert reserve_jobs(session, [JobReservation(job_id, RICH, RESERVE)], now_us=NOW_US)[0].ok
    completion = JobCompletion(job_id, RICH, OPERATORS[0], price_job(PARAMETERS, 500, 40))
    assert complete_jobs(session, [completion], hold_s=HOLD_S, now_us=NOW_US + 1)[0].ok
    close_us = NOW_US + 2 * 3_600 * 1_000_000
    assert epochs.close_epoch(session, epochs.due_epoch(close_us), now_us=close_us).ok
    released = [JobId("nothing"), job_id, JobId("nothing-either")]
    singles = tuple(jobs.release_job_credit(session, j, now_us=NOW_US + 2) for j in released)
    count = transfer_count(session)
    batched = release_job_credits(session, released, now_us=NOW_US + 2)
    assert batched == singles and transfer_count(session) == count
    assert [[result.code for result in payment.results] for payment in batched] == [[], [ResultCode.EPOCH_CLOSED], []]
