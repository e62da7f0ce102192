"""The public book API on both backends: codes, idempotency, pending resolution and batches."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, delete
from sqlalchemy.orm import Session

from ledger import book
from ledger.storage import tables
from ledger.errors import LedgerNotInstalledError
from ledger.model import (
    AccountKind,
    Balance,
    PostPending,
    ResultCode,
    TransferKind,
    TransferRequest,
    TransferState,
    VoidPending,
)
from ledger.units import AMOUNT_MAX
from tests.ledger.helpers import ALICE, BOB, ESCROW, NOW_US, SOURCE, fund, open_accounts, reserve, transfer_count

SECOND_US = 1_000_000


def pay(transfer_id: str, amount: int, debit: str = ALICE, credit: str = BOB, **fields: object) -> TransferRequest:
    return TransferRequest(
        id=transfer_id, debit_account=debit, credit_account=credit, amount=amount,
        kind=TransferKind.CORRECTION, **fields,  # type: ignore[arg-type]
    )


def test_ensure_account_is_idempotent(session: Session) -> None:
    assert book.ensure_account(session, ALICE, AccountKind.CONSUMER) is ResultCode.CREATED
    assert book.ensure_account(session, ALICE, AccountKind.CONSUMER) is ResultCode.EXISTS
    assert book.ensure_account(session, ALICE, AccountKind.OPERATOR) is ResultCode.EXISTS_WITH_DIFFERENT_FIELDS
    assert book.ensure_account(session, "has space", AccountKind.CONSUMER) is ResultCode.INVALID_ID
    assert book.balance(session, ALICE) == Balance()
    assert book.balance(session, "consumer:nobody") is None


def test_single_phase_transfer_moves_posted_balances(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    assert book.create_transfer(session, pay("t1", 400), now_us=NOW_US).code is ResultCode.CREATED
    assert book.balance(session, ALICE) == Balance(debits_posted=400, credits_posted=1_000)
    assert book.balance(session, BOB) == Balance(credits_posted=400)
    assert book.balance(session, ALICE).available == 600  # type: ignore[union-attr]
    assert book.balance(session, SOURCE).net_posted == -1_000  # type: ignore[union-attr]


def test_lookups_by_id_find_exactly_the_stored_ids(session: Session) -> None:
    # The PostgreSQL reads send the ids as one space-joined text; odd characters must not leak through.
    open_accounts(session)
    fund(session, ALICE, 1_000)
    stored = ["t,1", 't"2', "t\\3", "t{4}", "t'5"]
    for transfer_id in stored:
        assert book.create_transfer(session, pay(transfer_id, 1), now_us=NOW_US).code is ResultCode.CREATED
    asked = [*stored, "t,1", "t,1 t\"2", "t", "", "t{4} ", "missing", "deposit-1"]
    assert book.existing_transfer_ids(session, asked) == {*stored, "deposit-1"}
    assert set(book.get_transfers(session, asked)) == {*stored, "deposit-1"}
    assert book.existing_transfer_ids(session, []) == set()
    assert book.accounts_exist(session, [(ALICE, AccountKind.CONSUMER), (BOB, AccountKind.OPERATOR)])


def test_lookups_by_id_take_lists_longer_than_any_parameter_limit(session: Session) -> None:
    # SQLite sends the ids as one JSON list and PostgreSQL as one text: no list is cut into chunks.
    open_accounts(session)
    fund(session, ALICE, 1_000)
    stored = [f"t{n}" for n in range(0, 1_500, 300)]
    for transfer_id in stored:
        assert book.create_transfer(session, pay(transfer_id, 1), now_us=NOW_US).code is ResultCode.CREATED
    asked = [f"t{n}" for n in range(1_500)]
    assert book.existing_transfer_ids(session, asked) == set(stored)
    assert set(book.get_transfers(session, asked)) == set(stored)


def test_retry_answers_exists_and_a_different_retry_writes_nothing(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    first = book.create_transfer(session, pay("t1", 400))
    retry = book.create_transfer(session, pay("t1", 400))
    assert (first.code, retry.code) == (ResultCode.CREATED, ResultCode.EXISTS)
    assert retry.transfer == first.transfer
    for different in (pay("t1", 401), pay("t1", 400, credit=ESCROW), pay("t1", 400, job_id="job-x"),
                      pay("t1", 400, pending=True)):
        assert book.create_transfer(session, different).code is ResultCode.EXISTS_WITH_DIFFERENT_FIELDS
    assert book.balance(session, ALICE) == Balance(debits_posted=400, credits_posted=1_000)
    assert transfer_count(session) == 2


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (pay("t1", 0), ResultCode.INVALID_AMOUNT),
        (pay("t1", -5), ResultCode.INVALID_AMOUNT),
        (pay("t1", AMOUNT_MAX + 1), ResultCode.INVALID_AMOUNT),
        (pay("t1", True), ResultCode.INVALID_AMOUNT),  # type: ignore[arg-type]
        (pay("", 5), ResultCode.INVALID_ID),
        (pay("t" * 129, 5), ResultCode.INVALID_ID),
        (pay("t1", 5, credit=ALICE), ResultCode.ACCOUNTS_MUST_DIFFER),
        (pay("t1", 5, debit="consumer:ghost"), ResultCode.DEBIT_ACCOUNT_NOT_FOUND),
        (pay("t1", 5, credit="operator:ghost"), ResultCode.CREDIT_ACCOUNT_NOT_FOUND),
        (pay("t1", 5, timeout_s=10), ResultCode.INVALID_TIMEOUT),
        (pay("t1", 5, pending=True, timeout_s=-1), ResultCode.INVALID_TIMEOUT),
        (pay("t1", 5, policy_version="v" * 33), ResultCode.INVALID_FIELD),
        (pay("t1", 5, job_id="job 1"), ResultCode.INVALID_FIELD),
        (pay("t1", 1_001), ResultCode.EXCEEDS_CREDITS),
    ],
)
def test_invalid_requests_answer_a_code_and_write_nothing(
    session: Session, request_: TransferRequest, code: ResultCode
) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    assert book.create_transfer(session, request_).code is code
    assert transfer_count(session) == 1


def test_balances_never_overflow_int64(session: Session) -> None:
    open_accounts(session)
    book.ensure_account(session, "issuance:test", AccountKind.ISSUANCE)
    fund(session, BOB, AMOUNT_MAX)  # the source's debits are now at the maximum too
    more_debits = TransferRequest(
        id="t2", debit_account=SOURCE, credit_account=ALICE, amount=1, kind=TransferKind.DEPOSIT
    )
    more_credits = TransferRequest(id="t3", debit_account="issuance:test", credit_account=BOB, amount=1,
                                   kind=TransferKind.DEPOSIT)
    assert book.create_transfer(session, more_debits).code is ResultCode.OVERFLOWS_DEBITS
    assert book.create_transfer(session, more_credits).code is ResultCode.OVERFLOWS_CREDITS
    assert book.balance(session, SOURCE) == Balance(debits_posted=AMOUNT_MAX)  # every digit kept


def test_pending_holds_then_post_releases_the_rest(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    assert reserve(session, "r1", 700) is ResultCode.CREATED
    assert book.balance(session, ALICE) == Balance(debits_pending=700, credits_posted=1_000)
    assert reserve(session, "r2", 301) is ResultCode.EXCEEDS_CREDITS  # the hold counts against the balance
    posted = book.post_pending(session, "p1", "r1", 250, now_us=NOW_US)
    assert posted.code is ResultCode.CREATED
    assert posted.transfer is not None and posted.transfer.state is TransferState.POSTED
    assert posted.transfer.kind is TransferKind.JOB_RESERVE  # inherited from the pending transfer
    assert book.balance(session, ALICE) == Balance(debits_posted=250, credits_posted=1_000)
    assert book.balance(session, ESCROW) == Balance(credits_posted=250)
    assert book.pending_state(session, "r1") is TransferState.POSTED


def test_post_defaults_to_the_full_amount_and_void_releases_all(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    reserve(session, "r1", 300)
    reserve(session, "r2", 200)
    assert book.post_pending(session, "p1", "r1").transfer.amount == 300  # type: ignore[union-attr]
    assert book.void_pending(session, "v2", "r2").code is ResultCode.CREATED
    assert book.balance(session, ALICE) == Balance(debits_posted=300, credits_posted=1_000)
    assert book.pending_state(session, "r2") is TransferState.VOIDED


def test_each_pending_transfer_resolves_at_most_once(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    reserve(session, "r1", 300)
    assert book.post_pending(session, "p1", "r1", 100).code is ResultCode.CREATED
    assert book.post_pending(session, "p1", "r1", 100).code is ResultCode.EXISTS  # a retry
    assert book.post_pending(session, "p1", "r1", 99).code is ResultCode.EXISTS_WITH_DIFFERENT_FIELDS
    assert book.post_pending(session, "p2", "r1", 100).code is ResultCode.PENDING_ALREADY_RESOLVED
    assert book.void_pending(session, "v1", "r1").code is ResultCode.PENDING_ALREADY_RESOLVED
    assert book.expire_pending(session, "e1", "r1").code is ResultCode.PENDING_ALREADY_RESOLVED
    assert book.balance(session, ALICE) == Balance(debits_posted=100, credits_posted=1_000)
    assert transfer_count(session) == 3


@pytest.mark.parametrize(
    ("resolve", "code"),
    [
        (lambda s: book.post_pending(s, "p1", "nope"), ResultCode.PENDING_TRANSFER_NOT_FOUND),
        (lambda s: book.post_pending(s, "p1", "deposit-1"), ResultCode.PENDING_TRANSFER_NOT_PENDING),
        (lambda s: book.post_pending(s, "r1", "r1"), ResultCode.PENDING_ID_MUST_DIFFER),
        (lambda s: book.post_pending(s, "p1", "r1", 301), ResultCode.EXCEEDS_PENDING_AMOUNT),
        (lambda s: book.post_pending(s, "p1", "r1", 0), ResultCode.INVALID_AMOUNT),
        (lambda s: book.post_pending(s, "deposit-1", "r1"), ResultCode.EXISTS_WITH_DIFFERENT_FIELDS),
        (lambda s: book.expire_pending(s, "e1", "r1"), ResultCode.PENDING_TRANSFER_HAS_NO_TIMEOUT),
    ],
)
def test_bad_resolutions_answer_a_code(session: Session, resolve, code: ResultCode) -> None:  # noqa: ANN001
    open_accounts(session)
    fund(session, ALICE, 1_000)
    reserve(session, "r1", 300)
    assert resolve(session).code is code
    assert book.pending_state(session, "r1") is TransferState.PENDING


def test_resolution_can_insist_on_the_accounts(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    reserve(session, "r1", 300)
    wrong_debit = PostPending(id="p1", pending_id="r1", debit_account=BOB)
    wrong_credit = VoidPending(id="v1", pending_id="r1", credit_account=BOB)
    debit_code = book.create_transfers(session, [wrong_debit])[0].code
    credit_code = book.create_transfers(session, [wrong_credit])[0].code
    assert debit_code is ResultCode.PENDING_TRANSFER_HAS_DIFFERENT_DEBIT_ACCOUNT
    assert credit_code is ResultCode.PENDING_TRANSFER_HAS_DIFFERENT_CREDIT_ACCOUNT


def test_timeouts_decide_between_post_and_expire(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    reserve(session, "r1", 300, timeout_s=60)
    reserve(session, "r2", 300, timeout_s=60)
    before = NOW_US + 59 * SECOND_US
    after = NOW_US + 60 * SECOND_US
    assert book.expire_pending(session, "e1", "r1", now_us=before).code is ResultCode.PENDING_TRANSFER_NOT_EXPIRED
    assert book.expired_pending_ids(session, before) == ()
    assert book.expired_pending_ids(session, after) == ("r1", "r2")
    assert book.post_pending(session, "p1", "r1", now_us=after).code is ResultCode.PENDING_TRANSFER_EXPIRED
    assert book.void_pending(session, "v2", "r2", now_us=after).code is ResultCode.PENDING_TRANSFER_EXPIRED
    assert book.expire_pending(session, "e1", "r1", now_us=after).code is ResultCode.CREATED
    assert book.post_pending(session, "p2", "r2", now_us=before).code is ResultCode.CREATED
    assert book.expired_pending_ids(session, after) == ()
    assert book.pending_state(session, "r1") is TransferState.EXPIRED
    assert book.balance(session, ALICE) == Balance(debits_posted=300, credits_posted=1_000)


def test_a_batch_is_all_or_nothing(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    batch = [pay("t1", 500), pay("t2", 400), pay("t3", 200)]  # the third overdraws Alice
    results = book.create_transfers(session, batch)
    assert [r.code for r in results] == [ResultCode.LINKED_EVENT_FAILED, ResultCode.LINKED_EVENT_FAILED,
                                         ResultCode.EXCEEDS_CREDITS]
    assert transfer_count(session) == 1
    assert [r.code for r in book.create_transfers(session, batch[:2])] == [ResultCode.CREATED] * 2


def test_a_batch_can_create_and_resolve_a_pending_transfer(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    pending = TransferRequest(id="r1", debit_account=ALICE, credit_account=ESCROW, amount=300,
                              kind=TransferKind.JOB_RESERVE, pending=True)
    results = book.create_transfers(session, [pending, PostPending(id="p1", pending_id="r1", amount=120)])
    assert all(result.code is ResultCode.CREATED for result in results)
    assert book.balance(session, ALICE) == Balance(debits_posted=120, credits_posted=1_000)
    assert [t.id for t in book.transfers_for_job(session, "none")] == []


def test_transfers_for_job_tells_the_whole_story(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    pending = TransferRequest(id="job-1:reserve", debit_account=ALICE, credit_account=ESCROW, amount=300,
                              kind=TransferKind.JOB_RESERVE, pending=True, job_id="job-1")
    book.create_transfer(session, pending)
    book.post_pending(session, "job-1:post", "job-1:reserve", 100, policy_version="2026-12.1")
    story = book.transfers_for_job(session, "job-1")
    assert [(t.id, t.state, t.amount) for t in story] == [
        ("job-1:reserve", TransferState.PENDING, 300), ("job-1:post", TransferState.POSTED, 100)
    ]
    assert story[1].policy_version == "2026-12.1" and story[0].policy_version is None


def test_chain_head_follows_the_last_transfer(session: Session) -> None:
    assert book.chain_head(session).last_sequence == 0
    open_accounts(session)
    fund(session, ALICE, 10)
    head = book.chain_head(session)
    assert (head.last_sequence, head.last_transfer_id) == (1, "deposit-1")
    assert head.last_hash == book.get_transfer(session, "deposit-1").hash  # type: ignore[union-attr]


def test_missing_chain_head_is_a_clear_error(session: Session) -> None:
    session.execute(delete(tables.chain_head))
    with pytest.raises(LedgerNotInstalledError, match="0002_ledger"):
        book.ensure_account(session, ALICE, AccountKind.CONSUMER)


def test_nothing_is_committed_by_the_ledger(engine: Engine) -> None:
    with Session(engine) as session:
        open_accounts(session)
        fund(session, ALICE, 10)
        session.rollback()
    with Session(engine) as session:
        assert book.balance(session, ALICE) is None
        assert book.chain_head(session).last_sequence == 0
