"""Epoch close: seat rewards, sweeps into the payout tree, and sealing the closed window."""

from __future__ import annotations

from sqlalchemy.orm import Session

from contracts.ids import JobId, OperatorId
from ledger import book, epochs, jobs
from ledger.storage import epoch_store
from ledger.epochs import EpochCode
from ledger.merkle import PayoutLeaf, verify_proof
from ledger.model import Balance, ResultCode
from ledger.policy import DEFAULT_POLICY, price_job
from ledger.seats import SeatInput
from tests.ledger.helpers import transfer_count

HOUR_US = 3_600 * 1_000_000
EPOCH = 480_000  # an hour in 2024
START_US = EPOCH * HOUR_US
CLOSE_US = START_US + HOUR_US + 5_000_000
PRICE = price_job(8 * 10**9, prompt_tokens=1_000, completion_tokens=500)
ALICE_ADDRESS = "0x" + "a1" * 20
CAROL_ADDRESS = "0x" + "C3" * 20


def credit(session: Session, job: str, operator: str, at_us: int) -> None:
    assert jobs.credit_operator_for_job(session, JobId(job), OperatorId(operator), PRICE, now_us=at_us).ok


def test_close_sweeps_operators_with_addresses_into_the_tree(session: Session) -> None:
    credit(session, "job-1", "alice", START_US + 1)
    credit(session, "job-2", "alice", START_US + 2)
    credit(session, "job-3", "bob", START_US + 3)  # bob has no payout address: his balance carries over
    assert epochs.set_payout_address(session, "alice", ALICE_ADDRESS) is ResultCode.CREATED
    closed = epochs.close_epoch(session, EPOCH, now_us=CLOSE_US)
    assert closed.code is EpochCode.CREATED and closed.epoch is not None
    assert closed.epoch.total == 2 * PRICE.operator_credit and closed.epoch.leaf_count == 1
    assert book.balance(session, "operator:alice").available == 0  # type: ignore[union-attr]
    assert book.balance(session, "operator:bob").available == PRICE.operator_credit  # type: ignore[union-attr]
    tree = epochs.epoch_tree(session, EPOCH)
    assert tree is not None and "0x" + tree.root.hex() == closed.epoch.root
    leaf = PayoutLeaf(EPOCH, ALICE_ADDRESS, 2 * PRICE.operator_credit)
    assert verify_proof(leaf, tree.proof(leaf), tree.root)
    assert book.verify_chain(session).ok and book.verify_balances(session).ok


def test_close_is_idempotent_and_in_order(session: Session) -> None:
    assert epochs.close_epoch(session, EPOCH, now_us=CLOSE_US - HOUR_US).code is EpochCode.EPOCH_NOT_OVER
    first = epochs.close_epoch(session, EPOCH, now_us=CLOSE_US)
    assert first.code is EpochCode.CREATED and first.epoch is not None and first.epoch.root is None
    count = transfer_count(session)
    again = epochs.close_epoch(session, EPOCH, now_us=CLOSE_US + 1)
    assert again.code is EpochCode.EXISTS and again.epoch == first.epoch
    assert epochs.close_epoch(session, EPOCH - 1, now_us=CLOSE_US + 1).code is EpochCode.EPOCH_OUT_OF_ORDER
    assert transfer_count(session) == count


def test_a_transfer_dated_in_a_closed_epoch_is_refused(session: Session) -> None:
    epochs.close_epoch(session, EPOCH, now_us=CLOSE_US)
    late = jobs.credit_operator_for_job(session, JobId("job-9"), OperatorId("alice"), PRICE, now_us=CLOSE_US)
    assert late.failure is not None and late.failure.code is ResultCode.EPOCH_CLOSED
    assert book.balance(session, "operator:alice") == Balance()
    credit(session, "job-9", "alice", CLOSE_US + 1)


def test_a_qualified_ultra_seat_earns_its_reward_and_job_bonus(session: Session) -> None:
    credit(session, "job-1", "carol", START_US + 1)
    credit(session, "job-2", "carol", START_US + 2)  # run on carol's other, idle Mac: no bonus
    epochs.set_payout_address(session, "carol", CAROL_ADDRESS)
    seat = SeatInput("node-ultra", "carol", availability_bps=9_800, job_ids=("job-1",))
    closed = epochs.close_epoch(session, EPOCH, [seat], now_us=CLOSE_US)
    assert closed.ok and closed.epoch is not None
    (outcome,) = epoch_store.seat_outcomes(session, EPOCH)
    assert outcome.qualified and outcome.bonus_job_count == 1
    assert outcome.job_bonus == PRICE.operator_credit * DEFAULT_POLICY.dedicated_ultra_bonus_bps // 10_000
    assert outcome.availability_reward == DEFAULT_POLICY.availability_reward_per_seat_hour * 9_800 // 10_000
    expected = 2 * PRICE.operator_credit + outcome.job_bonus + outcome.availability_reward
    assert closed.epoch.total == expected
    assert epoch_store.payouts(session, EPOCH)[0].address == CAROL_ADDRESS.lower()
    assert book.verify_balances(session).ok


def test_a_seat_below_the_threshold_loses_the_bonus_and_says_why(session: Session) -> None:
    credit(session, "job-1", "carol", START_US + 1)
    seat = SeatInput("node-ultra", "carol", availability_bps=9_320, job_ids=("job-1",))
    assert epochs.close_epoch(session, EPOCH, [seat], now_us=CLOSE_US).ok
    (outcome,) = epoch_store.seat_outcomes(session, EPOCH)
    assert not outcome.qualified and outcome.availability_reward == 0 and outcome.job_bonus == 0
    assert "93.20%" in outcome.reason and "95.00%" in outcome.reason
    assert book.balance(session, "operator:carol").available == PRICE.operator_credit  # type: ignore[union-attr]


def test_malformed_inputs_are_refused(session: Session) -> None:
    assert epochs.set_payout_address(session, "alice", "0x1234") is ResultCode.INVALID_FIELD
    twice = [SeatInput("node-1", "a", 10_000, ()), SeatInput("node-1", "b", 10_000, ())]
    assert epochs.close_epoch(session, EPOCH, twice, now_us=CLOSE_US).code is EpochCode.INVALID_SEAT
    assert epoch_store.last_epoch(session) is None


def test_due_epoch_is_the_last_finished_hour() -> None:
    assert epochs.due_epoch(START_US + HOUR_US) == EPOCH
    assert epochs.due_epoch(START_US + HOUR_US - 1) == EPOCH - 1
