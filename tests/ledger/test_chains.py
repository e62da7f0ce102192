"""create_transfer_chains: many linked chains in one call, each all-or-nothing, the chains independent.

The property: applying chains in one call gives the same results, rows, hashes and
balances as applying them one call per chain, and the same codes as the reference
model of test_properties. The examples: a bad chain is refused with its code while the
good ones around it apply, retries answer `exists` within and across calls, and a fault
in the middle of the write leaves nothing once the transaction rolls back.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule, run_state_machine_as_test
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from ledger import book, epochs, rules
from ledger.storage import tables
from ledger.model import (
    Balance,
    Operation,
    PostPending,
    ResultCode,
    TransferKind,
    TransferRequest,
    VoidPending,
)
from tests.ledger.helpers import ALICE, BOB, ESCROW, NOW_US, SOURCE, fund, open_accounts, transfer_count
from tests.ledger.test_properties import LedgerMachine

HOUR_US = 3_600 * 1_000_000


def journal(session: Session) -> list[tuple[Any, ...]]:
    """Every stored transfer and balance, and the chain head: what two ways of writing must agree on.

    Accounts leave out created_at_us: opening one reads the wall clock, not the ledger's now_us.
    """
    transfers = session.execute(select(tables.transfers).order_by(tables.transfers.c.sequence)).all()
    account_columns = [column for column in tables.accounts.columns if column.name != "created_at_us"]
    accounts = session.execute(select(*account_columns).order_by(tables.accounts.c.id)).all()
    head = session.execute(select(tables.chain_head)).all()
    return [tuple(row) for row in [*transfers, *accounts, *head]]


class ChainsMachine(LedgerMachine):
    """LedgerMachine's rules plus calls of several chains, checked against one call per chain."""

    @rule(data=st.data(), sizes=st.lists(st.sampled_from([1, 1, 2, 3]), min_size=1, max_size=5))
    def submit_chains(self, data: st.DataObject, sizes: list[int]) -> None:
        chains = [[data.draw(self.operations()) for _ in range(size)] for size in sizes]
        expected = [self.expect(chain) for chain in chains]
        one_call_each = self.session.begin_nested()
        one_by_one = tuple(book.create_transfers(self.session, chain, now_us=self.now_us) for chain in chains)
        written_one_by_one = journal(self.session)
        one_call_each.rollback()
        at_once = book.create_transfer_chains(self.session, chains, now_us=self.now_us)
        assert at_once == one_by_one, chains  # the same codes and the same stored transfers, hashes included
        assert journal(self.session) == written_one_by_one
        assert [[result.code for result in results] for results in at_once] == expected, chains


def test_chains_in_one_call_equal_one_call_per_chain(session: Session) -> None:
    run_state_machine_as_test(
        lambda: ChainsMachine(session),
        settings=settings(max_examples=30, stateful_step_count=25, deadline=None),
    )


def request(transfer_id: str, debit: str, credit: str, amount: int, *, pending: bool = False) -> TransferRequest:
    return TransferRequest(id=transfer_id, debit_account=debit, credit_account=credit, amount=amount,
                           kind=TransferKind.CORRECTION, pending=pending)


def codes(results: tuple[tuple[Any, ...], ...]) -> list[list[ResultCode]]:
    return [[result.code for result in chain] for chain in results]


def test_a_bad_chain_is_refused_with_its_code_and_the_good_ones_apply(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 100)
    before = transfer_count(session)
    chains: list[list[Operation]] = [
        [request("hold", ALICE, ESCROW, 30, pending=True)],
        [request("ghost", "consumer:nobody", ESCROW, 5)],
        [request("negative", ALICE, ESCROW, -5)],
        [PostPending(id="post-too-much", pending_id="hold", amount=31)],
        [request("pay-bob", SOURCE, BOB, 1), request("overdraw", ALICE, BOB, 1_000)],
        [PostPending(id="post", pending_id="hold", amount=20)],
        [request("tip", ALICE, BOB, 7)],
    ]
    results = book.create_transfer_chains(session, chains, now_us=NOW_US)
    assert codes(results) == [
        [ResultCode.CREATED],
        [ResultCode.DEBIT_ACCOUNT_NOT_FOUND],
        [ResultCode.INVALID_AMOUNT],
        [ResultCode.EXCEEDS_PENDING_AMOUNT],
        [ResultCode.LINKED_EVENT_FAILED, ResultCode.EXCEEDS_CREDITS],
        [ResultCode.CREATED],
        [ResultCode.CREATED],
    ]
    assert transfer_count(session) == before + 3  # hold, post and tip; nothing of the refused chains
    assert book.get_transfer(session, "pay-bob") is None
    assert book.balance(session, ALICE) == Balance(debits_posted=27, credits_posted=100)
    assert book.balance(session, BOB) == Balance(credits_posted=7)
    assert book.balance(session, ESCROW) == Balance(credits_posted=20)
    assert book.verify_chain(session).ok and book.verify_balances(session).ok


def test_retries_answer_exists_within_a_call_and_across_calls(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 100)
    pay = request("pay", ALICE, BOB, 10)
    changed = request("pay", ALICE, BOB, 11)
    first = book.create_transfer_chains(session, [[pay], [pay], [changed]], now_us=NOW_US)
    assert codes(first) == [[ResultCode.CREATED], [ResultCode.EXISTS], [ResultCode.EXISTS_WITH_DIFFERENT_FIELDS]]
    count = transfer_count(session)
    again = book.create_transfer_chains(session, [[pay], [changed]], now_us=NOW_US + 1)
    assert codes(again) == [[ResultCode.EXISTS], [ResultCode.EXISTS_WITH_DIFFERENT_FIELDS]]
    assert transfer_count(session) == count
    assert book.balance(session, BOB) == Balance(credits_posted=10)  # paid once


def test_a_pending_transfer_resolves_once_within_a_call(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 100)
    results = book.create_transfer_chains(session, [
        [request("hold", ALICE, ESCROW, 40, pending=True)],
        [PostPending(id="post", pending_id="hold", amount=25)],
        [VoidPending(id="void", pending_id="hold")],
        [PostPending(id="post-again", pending_id="hold")],
    ], now_us=NOW_US)
    assert codes(results) == [[ResultCode.CREATED], [ResultCode.CREATED], [ResultCode.PENDING_ALREADY_RESOLVED],
                              [ResultCode.PENDING_ALREADY_RESOLVED]]
    assert book.balance(session, ALICE) == Balance(debits_posted=25, credits_posted=100)


def test_a_closed_epoch_refuses_every_chain(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 100)
    number = epochs.due_epoch(NOW_US + 2 * HOUR_US)
    assert epochs.close_epoch(session, number, now_us=NOW_US + 2 * HOUR_US).ok
    count = transfer_count(session)
    late = book.create_transfer_chains(session, [[request("a", ALICE, BOB, 1)],
                                                 [request("b", SOURCE, BOB, 1), request("c", SOURCE, BOB, 1)]],
                                       now_us=NOW_US + HOUR_US)
    assert codes(late) == [[ResultCode.EPOCH_CLOSED], [ResultCode.EPOCH_CLOSED, ResultCode.LINKED_EVENT_FAILED]]
    assert transfer_count(session) == count


class InjectedFault(Exception):
    """Stands for the process dying, or the connection dropping, in the middle of a write."""


# In the database itself, so the fault comes whichever way the write reaches it (SQLAlchemy, or the driver).
_FAULT_TRIGGERS = {
    "sqlite": ["CREATE TRIGGER fail_on_balances BEFORE UPDATE ON ledger_accounts"
               " BEGIN SELECT RAISE(ABORT, 'injected fault'); END"],
    "postgresql": ["CREATE FUNCTION fail_on_balances() RETURNS trigger LANGUAGE plpgsql"
                   " AS $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$",
                   "CREATE TRIGGER fail_on_balances BEFORE UPDATE ON ledger_accounts"
                   " FOR EACH ROW EXECUTE FUNCTION fail_on_balances()"],
}


def test_a_fault_in_the_middle_of_the_write_leaves_nothing(engine: Engine) -> None:
    with Session(engine) as session:
        open_accounts(session)
        fund(session, ALICE, 100)
        session.commit()
        before = journal(session)
        # From now on balances cannot move; by the time they would, the transfers are already inserted.
        for statement in _FAULT_TRIGGERS[engine.dialect.name]:
            session.execute(text(statement))
        session.commit()
    with Session(engine) as session, pytest.raises(Exception, match="injected fault"):
        book.create_transfer_chains(session, [[request("a", ALICE, BOB, 10)], [request("b", SOURCE, BOB, 5)]],
                                    now_us=NOW_US)
    with Session(engine) as session:
        assert journal(session) == before
        assert book.verify_chain(session).ok and book.verify_balances(session).ok


def test_a_call_holds_thousands_of_chains(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 10_000)
    holds = [[request(f"hold-{index}", ALICE, ESCROW, 2, pending=True)] for index in range(1_500)]
    assert all(result.ok for [result] in book.create_transfer_chains(session, holds, now_us=NOW_US))
    posts = [[PostPending(id=f"post-{index}", pending_id=f"hold-{index}", amount=1)] for index in range(1_500)]
    assert all(result.ok for [result] in book.create_transfer_chains(session, posts, now_us=NOW_US))
    assert book.balance(session, ALICE) == Balance(debits_posted=1_500, credits_posted=10_000)
    assert book.verify_chain(session).ok and book.verify_balances(session).ok


def test_chains_failing_on_either_side_of_a_streamed_batch_write_what_one_call_each_writes(
        session: Session) -> None:
    """Rows stream out every SETTLE_EVERY_CHAINS chains: failed chains around those points leave no row."""
    open_accounts(session)
    fund(session, ALICE, 1_000)
    count = 3 * rules.SETTLE_EVERY_CHAINS + 5
    # Every fifth chain overdraws BOB on its second transfer, so the first must be undone too.
    chains = [[request(f"c{index}-a", ALICE, BOB, 1),
               request(f"c{index}-b", BOB, ESCROW, 100 if index % 5 == 0 else 1)] for index in range(count)]
    chains[rules.SETTLE_EVERY_CHAINS - 1][1] = request("last-before-a-send", BOB, ESCROW, 10_000)
    one_call_each = session.begin_nested()
    one_by_one = [book.create_transfers(session, chain, now_us=NOW_US) for chain in chains]
    expected = journal(session)
    one_call_each.rollback()
    at_once = book.create_transfer_chains(session, chains, now_us=NOW_US)
    assert codes(at_once) == codes(tuple(one_by_one))
    assert sum(1 for chain in at_once if not chain[0].ok) > count // 5  # failures did happen
    assert journal(session) == expected
    assert book.verify_chain(session).ok and book.verify_balances(session).ok


def test_a_fault_after_some_rows_were_streamed_leaves_nothing(engine: Engine,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with Session(engine) as session:
        open_accounts(session)
        fund(session, ALICE, 1_000)
        session.commit()
        before = journal(session)
    applied = rules._apply_chain
    calls = 0

    def fail_after_the_first_send(chain: Any, working: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > rules.SETTLE_EVERY_CHAINS + 1:  # the first SETTLE_EVERY_CHAINS chains' rows went out
            raise InjectedFault
        return applied(chain, working)

    monkeypatch.setattr(rules, "_apply_chain", fail_after_the_first_send)
    with Session(engine) as session, pytest.raises(InjectedFault):
        book.create_transfer_chains(
            session, [[request(f"t{index}", ALICE, BOB, 1)] for index in range(2 * rules.SETTLE_EVERY_CHAINS)],
            now_us=NOW_US)
    assert calls > rules.SETTLE_EVERY_CHAINS
    with Session(engine) as session:
        assert journal(session) == before
        assert book.verify_chain(session).ok and book.verify_balances(session).ok
