"""The job-payment flow the coordinator calls, on both backends."""

from __future__ import annotations

from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger import book, jobs
from ledger.book import JobStep, job_transfer_id
from ledger.model import Balance, ResultCode, TransferState
from ledger.policy import POLICY_VERSION, JobPrice, max_job_charge, price_job
from ledger.units import parse_mlx
from tests.ledger.helpers import NOW_US, transfer_count

JOB = JobId("job-0123456789abcdef")
CONSUMER = ConsumerId("alice")
OPERATOR = OperatorId("bob")
CONSUMER_ACCOUNT = jobs.consumer_account_id(CONSUMER)
OPERATOR_ACCOUNT = jobs.operator_account_id(OPERATOR)
PARAMETERS = 8 * 10**9
PRICE = price_job(PARAMETERS, prompt_tokens=1_000, completion_tokens=200)
RESERVED = max_job_charge(PARAMETERS, prompt_tokens=1_000, max_tokens=512)


def funded_consumer(session: Session, amount: int = parse_mlx("1")) -> None:
    assert jobs.open_consumer_account(session, CONSUMER) is ResultCode.CREATED
    assert jobs.deposit_for_consumer(session, "payment-1", CONSUMER, amount, now_us=NOW_US).code is ResultCode.CREATED


def test_job_transfer_ids_derive_from_job_and_step() -> None:
    assert job_transfer_id(JOB, JobStep.RESERVE) == "job-0123456789abcdef:reserve"
    assert len({job_transfer_id(JOB, step) for step in JobStep}) == len(JobStep)


def test_reserve_then_settle_pays_operator_and_treasury(session: Session) -> None:
    funded_consumer(session)
    assert jobs.reserve_job(session, JOB, CONSUMER, RESERVED).code is ResultCode.CREATED
    assert book.balance(session, CONSUMER_ACCOUNT).available == parse_mlx("1") - RESERVED  # type: ignore[union-attr]
    payment = jobs.settle_job(session, JOB, CONSUMER, OPERATOR, PRICE)
    assert payment.ok and [r.code for r in payment.results] == [ResultCode.CREATED] * 3
    assert book.balance(session, CONSUMER_ACCOUNT) == Balance(
        debits_posted=PRICE.consumer_charge, credits_posted=parse_mlx("1")
    )
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance(credits_posted=PRICE.operator_credit)
    assert book.balance(session, jobs.TREASURY_FEES_ACCOUNT) == Balance(credits_posted=PRICE.network_fee)
    escrow = book.balance(session, jobs.CONSUMER_ESCROW_ACCOUNT)
    assert escrow is not None and escrow.net_posted == 0 and escrow.debits_pending == 0
    story = book.transfers_for_job(session, JOB)
    assert [t.id.rsplit(":", 1)[1] for t in story] == ["reserve", "post", "credit", "fee"]
    assert all(t.policy_version == POLICY_VERSION for t in story[1:])


def test_settle_retry_answers_exists_and_never_pays_twice(session: Session) -> None:
    funded_consumer(session)
    jobs.reserve_job(session, JOB, CONSUMER, RESERVED)
    jobs.settle_job(session, JOB, CONSUMER, OPERATOR, PRICE)
    count = transfer_count(session)
    retry = jobs.settle_job(session, JOB, CONSUMER, OPERATOR, PRICE)
    assert retry.ok and [r.code for r in retry.results] == [ResultCode.EXISTS] * 3
    assert jobs.reserve_job(session, JOB, CONSUMER, RESERVED).code is ResultCode.EXISTS
    other_price = price_job(PARAMETERS, prompt_tokens=1_000, completion_tokens=300)
    different = jobs.settle_job(session, JOB, CONSUMER, OPERATOR, other_price)
    assert not different.ok and different.failure is not None
    assert different.failure.code is ResultCode.EXISTS_WITH_DIFFERENT_FIELDS
    assert jobs.void_job(session, JOB).code is ResultCode.PENDING_ALREADY_RESOLVED
    assert transfer_count(session) == count
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance(credits_posted=PRICE.operator_credit)


def test_void_releases_the_reservation_and_blocks_settling(session: Session) -> None:
    funded_consumer(session)
    jobs.reserve_job(session, JOB, CONSUMER, RESERVED)
    assert jobs.void_job(session, JOB).code is ResultCode.CREATED
    assert jobs.void_job(session, JOB).code is ResultCode.EXISTS
    assert book.balance(session, CONSUMER_ACCOUNT) == Balance(credits_posted=parse_mlx("1"))
    settle = jobs.settle_job(session, JOB, CONSUMER, OPERATOR, PRICE)
    assert settle.failure is not None and settle.failure.code is ResultCode.PENDING_ALREADY_RESOLVED
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance()


def test_reserve_needs_a_funded_prepaid_account(session: Session) -> None:
    assert jobs.reserve_job(session, JOB, CONSUMER, RESERVED).code is ResultCode.DEBIT_ACCOUNT_NOT_FOUND
    funded_consumer(session, amount=RESERVED - 1)
    assert jobs.reserve_job(session, JOB, CONSUMER, RESERVED).code is ResultCode.EXCEEDS_CREDITS
    assert jobs.reserve_job(session, JOB, CONSUMER, 0).code is ResultCode.INVALID_AMOUNT


def test_settle_above_the_reservation_writes_nothing(session: Session) -> None:
    funded_consumer(session)
    jobs.reserve_job(session, JOB, CONSUMER, PRICE.consumer_charge - 1)
    payment = jobs.settle_job(session, JOB, CONSUMER, OPERATOR, PRICE)
    assert payment.failure is not None and payment.failure.code is ResultCode.EXCEEDS_PENDING_AMOUNT
    assert [r.code for r in payment.results][1:] == [ResultCode.LINKED_EVENT_FAILED] * 2
    assert book.pending_state(session, job_transfer_id(JOB, JobStep.RESERVE)) is TransferState.PENDING


def test_settle_checks_the_reservation_belongs_to_the_consumer(session: Session) -> None:
    funded_consumer(session)
    jobs.reserve_job(session, JOB, CONSUMER, RESERVED)
    payment = jobs.settle_job(session, JOB, ConsumerId("mallory"), OPERATOR, PRICE)
    assert payment.failure is not None
    assert payment.failure.code is ResultCode.PENDING_TRANSFER_HAS_DIFFERENT_DEBIT_ACCOUNT


def test_a_free_job_voids_its_reservation(session: Session) -> None:
    funded_consumer(session)
    jobs.reserve_job(session, JOB, CONSUMER, RESERVED)
    free = JobPrice(0, 0, 0, POLICY_VERSION)
    payment = jobs.settle_job(session, JOB, CONSUMER, OPERATOR, free)
    assert payment.ok and book.pending_state(session, job_transfer_id(JOB, JobStep.RESERVE)) is TransferState.VOIDED


def test_a_tiny_charge_skips_zero_payouts(session: Session) -> None:
    funded_consumer(session)
    jobs.reserve_job(session, JOB, CONSUMER, RESERVED)
    tiny = JobPrice(consumer_charge=1, operator_credit=0, network_fee=1, policy_version=POLICY_VERSION)
    payment = jobs.settle_job(session, JOB, CONSUMER, OPERATOR, tiny)
    assert payment.ok and [r.id for r in payment.results] == [f"{JOB}:post", f"{JOB}:fee"]


def test_expire_job_after_its_timeout(session: Session) -> None:
    funded_consumer(session)
    jobs.reserve_job(session, JOB, CONSUMER, RESERVED, timeout_s=600, now_us=NOW_US)
    later = NOW_US + 600 * 1_000_000
    assert jobs.expire_job(session, JOB, now_us=later - 1).code is ResultCode.PENDING_TRANSFER_NOT_EXPIRED
    assert book.expired_pending_ids(session, later) == (job_transfer_id(JOB, JobStep.RESERVE),)
    assert jobs.expire_job(session, JOB, now_us=later).code is ResultCode.CREATED
    settle = jobs.settle_job(session, JOB, CONSUMER, OPERATOR, PRICE, now_us=later)
    assert settle.failure is not None and settle.failure.code is ResultCode.PENDING_ALREADY_RESOLVED
    assert book.balance(session, CONSUMER_ACCOUNT) == Balance(credits_posted=parse_mlx("1"))


def test_credit_operator_from_issuance_when_no_consumer_account(session: Session) -> None:
    payment = jobs.credit_operator_for_job(session, JOB, OPERATOR, PRICE)
    assert payment.ok and payment.results[0].code is ResultCode.CREATED
    assert jobs.credit_operator_for_job(session, JOB, OPERATOR, PRICE).results[0].code is ResultCode.EXISTS
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance(credits_posted=PRICE.operator_credit)
    issuance = book.balance(session, jobs.ISSUANCE_REWARDS_ACCOUNT)
    assert issuance is not None and issuance.net_posted == -PRICE.operator_credit
    assert jobs.credit_operator_for_job(session, JOB, OPERATOR, JobPrice(0, 0, 0, POLICY_VERSION)).results == ()


def test_one_job_cannot_be_paid_by_both_paths(session: Session) -> None:
    jobs.credit_operator_for_job(session, JOB, OPERATOR, PRICE)
    funded_consumer(session)
    jobs.reserve_job(session, JOB, CONSUMER, RESERVED)
    settle = jobs.settle_job(session, JOB, CONSUMER, OPERATOR, PRICE)
    assert settle.failure is not None and settle.failure.code is ResultCode.EXISTS_WITH_DIFFERENT_FIELDS
    assert book.pending_state(session, job_transfer_id(JOB, JobStep.RESERVE)) is TransferState.PENDING
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance(credits_posted=PRICE.operator_credit)
    assert jobs.void_job(session, JOB).code is ResultCode.CREATED  # the coordinator can still release it


def test_the_whole_flow_leaves_an_intact_ledger(session: Session) -> None:
    funded_consumer(session)
    for index in range(5):
        job = JobId(f"job-{index}")
        jobs.reserve_job(session, job, CONSUMER, RESERVED)
        if index % 2:
            jobs.void_job(session, job)
        else:
            jobs.settle_job(session, job, CONSUMER, OPERATOR, PRICE)
    assert book.verify_chain(session).ok
    assert book.verify_balances(session).ok
    assert book.balance(session, OPERATOR_ACCOUNT) == Balance(credits_posted=3 * PRICE.operator_credit)
