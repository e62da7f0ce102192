"""complete_job / release_job_credit / reject_job_credit: held operator credits, on both backends."""

from __future__ import annotations

from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger import book, jobs
from ledger.book import JobStep, job_transfer_id
from ledger.model import Balance, ResultCode, TransferKind, TransferState
from ledger.policy import POLICY_VERSION, JobPrice, max_job_charge, price_job
from ledger.units import parse_mlx
from tests.ledger.helpers import NOW_US, transfer_count

JOB = JobId("job-00000000000000000000000000000001")
CONSUMER = ConsumerId("alice")
OPERATOR = OperatorId("bob")
CONSUMER_ACCOUNT = jobs.consumer_account_id(CONSUMER)
OPERATOR_ACCOUNT = jobs.operator_account_id(OPERATOR)
PARAMETERS = 8 * 10**9
PRICE = price_job(PARAMETERS, prompt_tokens=1_000, completion_tokens=200)
RESERVED = max_job_charge(PARAMETERS, prompt_tokens=1_000, max_tokens=512)
FUNDS = parse_mlx("1")
HOLD_S = 3_600


def reserved_job(session: Session) -> None:
    assert jobs.open_consumer_account(session, CONSUMER) is ResultCode.CREATED
    assert jobs.deposit_for_consumer(session, "payment-1", CONSUMER, FUNDS, now_us=NOW_US).ok
    assert jobs.reserve_job(session, JOB, CONSUMER, RESERVED, now_us=NOW_US).code is ResultCode.CREATED


def complete(session: Session, consumer: ConsumerId | None = CONSUMER, price: JobPrice = PRICE) -> jobs.JobPayment:
    return jobs.complete_job(session, JOB, consumer, OPERATOR, price, hold_s=HOLD_S, now_us=NOW_US)


def codes(payment: jobs.JobPayment) -> list[ResultCode]:
    return [result.code for result in payment.results]


def test_complete_charges_the_tokens_made_and_holds_the_operator_credit(session: Session) -> None:
    reserved_job(session)
    payment = complete(session)
    assert codes(payment) == [ResultCode.CREATED] * 3
    assert book.balance(session, CONSUMER_ACCOUNT) == Balance(debits_posted=PRICE.consumer_charge, credits_posted=FUNDS)
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance(credits_pending=PRICE.operator_credit)
    assert book.balance(session, jobs.TREASURY_FEES_ACCOUNT) == Balance(credits_posted=PRICE.network_fee)
    credit = book.get_transfer(session, job_transfer_id(JOB, JobStep.CREDIT))
    assert credit is not None and credit.state is TransferState.PENDING
    assert credit.timeout_s == HOLD_S + jobs.CREDIT_HOLD_GRACE_S and credit.policy_version == POLICY_VERSION
    assert codes(complete(session)) == [ResultCode.EXISTS] * 3


def test_release_posts_the_credit_once(session: Session) -> None:
    reserved_job(session)
    complete(session)
    assert codes(jobs.release_job_credit(session, JOB, now_us=NOW_US)) == [ResultCode.CREATED]
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance(credits_posted=PRICE.operator_credit)
    count = transfer_count(session)
    assert codes(jobs.release_job_credit(session, JOB, now_us=NOW_US)) == [ResultCode.EXISTS]
    rejected = jobs.reject_job_credit(session, JOB, now_us=NOW_US)
    assert rejected.failure is not None and rejected.failure.code is ResultCode.PENDING_ALREADY_RESOLVED
    assert transfer_count(session) == count
    escrow = book.balance(session, jobs.CONSUMER_ESCROW_ACCOUNT)
    assert escrow is not None and escrow.net_posted == 0 and escrow.debits_pending == 0


def test_release_after_the_window_but_within_the_grace(session: Session) -> None:
    reserved_job(session)
    complete(session)
    later = NOW_US + (HOLD_S + 60) * 1_000_000
    assert jobs.release_job_credit(session, JOB, now_us=later).ok


def test_reject_voids_the_credit_and_refunds_the_whole_charge(session: Session) -> None:
    reserved_job(session)
    complete(session)
    payment = jobs.reject_job_credit(session, JOB, now_us=NOW_US)
    assert codes(payment) == [ResultCode.CREATED] * 3
    consumer = book.balance(session, CONSUMER_ACCOUNT)
    assert consumer is not None and consumer.net_posted == FUNDS and consumer.debits_pending == 0
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance()
    assert book.balance(session, jobs.TREASURY_FEES_ACCOUNT).net_posted == 0  # type: ignore[union-attr]
    escrow = book.balance(session, jobs.CONSUMER_ESCROW_ACCOUNT)
    assert escrow is not None and escrow.net_posted == 0 and escrow.debits_pending == 0
    refunds = [t for t in book.transfers_for_job(session, JOB) if t.kind is TransferKind.JOB_REFUND]
    assert sum(t.amount for t in refunds) == PRICE.consumer_charge
    assert codes(jobs.reject_job_credit(session, JOB, now_us=NOW_US)) == [ResultCode.EXISTS] * 3
    released = jobs.release_job_credit(session, JOB, now_us=NOW_US)
    assert released.failure is not None and released.failure.code is ResultCode.PENDING_ALREADY_RESOLVED
    assert book.verify_chain(session).ok and book.verify_balances(session).ok


def test_anonymous_jobs_hold_a_credit_from_issuance(session: Session) -> None:
    payment = complete(session, consumer=None)
    assert codes(payment) == [ResultCode.CREATED]
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance(credits_pending=PRICE.operator_credit)
    assert jobs.release_job_credit(session, JOB, now_us=NOW_US).ok
    issuance = book.balance(session, jobs.ISSUANCE_REWARDS_ACCOUNT)
    assert issuance is not None and issuance.net_posted == -PRICE.operator_credit


def test_anonymous_reject_voids_only_the_credit(session: Session) -> None:
    complete(session, consumer=None)
    assert codes(jobs.reject_job_credit(session, JOB, now_us=NOW_US)) == [ResultCode.CREATED]
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance()
    assert book.balance(session, jobs.ISSUANCE_REWARDS_ACCOUNT) == Balance()


def test_nothing_to_release_or_reject_for_an_unknown_job(session: Session) -> None:
    assert jobs.release_job_credit(session, JOB).results == ()
    assert jobs.reject_job_credit(session, JOB).results == ()
    assert transfer_count(session) == 0


def test_a_consumer_job_without_reservation_is_refused_whole(session: Session) -> None:
    assert jobs.open_consumer_account(session, CONSUMER) is ResultCode.CREATED
    payment = complete(session)
    assert payment.failure is not None and payment.failure.code is ResultCode.PENDING_TRANSFER_NOT_FOUND
    assert transfer_count(session) == 0


def test_a_charge_above_the_reservation_writes_nothing(session: Session) -> None:
    reserved_job(session)
    too_much = price_job(PARAMETERS, prompt_tokens=1_000, completion_tokens=100_000)
    payment = complete(session, price=too_much)
    assert payment.failure is not None and payment.failure.code is ResultCode.EXCEEDS_PENDING_AMOUNT
    assert book.pending_state(session, job_transfer_id(JOB, JobStep.RESERVE)) is TransferState.PENDING


def test_a_free_job_voids_the_reservation(session: Session) -> None:
    reserved_job(session)
    assert complete(session, price=JobPrice(0, 0, 0, POLICY_VERSION)).ok
    assert book.balance(session, CONSUMER_ACCOUNT) == Balance(credits_posted=FUNDS)
    assert jobs.reject_job_credit(session, JOB).results == ()


def test_a_legacy_posted_credit_blocks_holding_another(session: Session) -> None:
    assert jobs.credit_operator_for_job(session, JOB, OPERATOR, PRICE, now_us=NOW_US).ok
    again = complete(session, consumer=None)
    assert again.failure is not None and again.failure.code is ResultCode.EXISTS_WITH_DIFFERENT_FIELDS
    released = jobs.release_job_credit(session, JOB)
    assert released.failure is not None and released.failure.code is ResultCode.PENDING_TRANSFER_NOT_PENDING
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance(credits_posted=PRICE.operator_credit)
