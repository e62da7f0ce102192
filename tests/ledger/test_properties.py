"""Hypothesis: random sequences of create/post/void/expire batches against a reference model.

The reference predicts every result code with its own arithmetic. After every step, on
both backends: stored balances equal the reference, all debits equal all credits
(pending and posted separately), no-overdraft accounts are never overdrawn, and no
pending transfer is resolved twice; at the end the hash chain and balance audits pass.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, replace

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from sqlalchemy import select
from sqlalchemy.orm import Session

from ledger import book
from ledger.storage import tables
from ledger.model import (
    AccountKind,
    ExpirePending,
    Operation,
    PostPending,
    ResultCode,
    TransferKind,
    TransferRequest,
    VoidPending,
)
from tests.ledger.helpers import NOW_US

SECOND_US = 1_000_000
ACCOUNTS = {
    "external:src": (AccountKind.EXTERNAL, False),
    "consumer:a": (AccountKind.CONSUMER, True),
    "operator:b": (AccountKind.OPERATOR, True),
    "issuance:c": (AccountKind.ISSUANCE, False),
}
NO_OVERDRAFT = frozenset(account_id for account_id, (_, flag) in ACCOUNTS.items() if flag)
ACCOUNT_PAIRS = [(debit, credit) for debit in sorted(ACCOUNTS) for credit in sorted(ACCOUNTS) if debit != credit]
amounts = st.integers(min_value=1, max_value=400)


@dataclass(frozen=True)
class PendingInfo:
    amount: int
    debit_account: str
    credit_account: str
    expires_at_us: int | None


class Reference:
    """What the ledger should answer and hold, computed independently of ledger.rules."""

    def __init__(self) -> None:
        self.balances = {account_id: [0, 0, 0, 0] for account_id in ACCOUNTS}  # dp, dpo, cp, cpo
        self.created: dict[str, Operation] = {}
        self.pendings: dict[str, PendingInfo] = {}
        self.resolved: dict[str, str] = {}

    def expected(self, operation: Operation, now_us: int) -> ResultCode:
        if not isinstance(operation, TransferRequest) and operation.id == operation.pending_id:
            return ResultCode.PENDING_ID_MUST_DIFFER
        if operation.id in self.created:
            same = self.created[operation.id] == operation
            return ResultCode.EXISTS if same else ResultCode.EXISTS_WITH_DIFFERENT_FIELDS
        if isinstance(operation, TransferRequest):
            dp, dpo, _, cpo = self.balances[operation.debit_account]
            if operation.debit_account in NO_OVERDRAFT and dp + dpo + operation.amount > cpo:
                return ResultCode.EXCEEDS_CREDITS
            return ResultCode.CREATED
        info = self.pendings.get(operation.pending_id)
        if info is None:
            return ResultCode.PENDING_TRANSFER_NOT_PENDING  # the generator only names created transfers
        if operation.pending_id in self.resolved:
            return ResultCode.PENDING_ALREADY_RESOLVED
        expired = info.expires_at_us is not None and now_us >= info.expires_at_us
        if isinstance(operation, ExpirePending):
            if info.expires_at_us is None:
                return ResultCode.PENDING_TRANSFER_HAS_NO_TIMEOUT
            return ResultCode.CREATED if expired else ResultCode.PENDING_TRANSFER_NOT_EXPIRED
        if expired:
            return ResultCode.PENDING_TRANSFER_EXPIRED
        if isinstance(operation, PostPending) and (operation.amount or 0) > info.amount:
            return ResultCode.EXCEEDS_PENDING_AMOUNT
        return ResultCode.CREATED

    def apply(self, operation: Operation, now_us: int) -> None:
        self.created[operation.id] = operation
        if isinstance(operation, TransferRequest):
            column = 0 if operation.pending else 1
            self.balances[operation.debit_account][column] += operation.amount
            self.balances[operation.credit_account][column + 2] += operation.amount
            if operation.pending:
                expires_at_us = now_us + operation.timeout_s * SECOND_US if operation.timeout_s else None
                self.pendings[operation.id] = PendingInfo(
                    operation.amount, operation.debit_account, operation.credit_account, expires_at_us
                )
            return
        info = self.pendings[operation.pending_id]
        posted = (operation.amount or info.amount) if isinstance(operation, PostPending) else 0
        self.balances[info.debit_account][0] -= info.amount
        self.balances[info.debit_account][1] += posted
        self.balances[info.credit_account][2] -= info.amount
        self.balances[info.credit_account][3] += posted
        self.resolved[operation.pending_id] = operation.id


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.reference = Reference()
        self.now_us = NOW_US
        self.serial = 0

    @initialize()
    def open_accounts(self) -> None:
        self.session.rollback()  # every run starts from the empty schema
        for account_id, (kind, no_overdraft) in ACCOUNTS.items():
            code = book.ensure_account(self.session, account_id, kind, debits_must_not_exceed_credits=no_overdraft)
            assert code is ResultCode.CREATED

    def fresh_id(self) -> str:
        self.serial += 1
        return f"x{self.serial}"

    def operations(self) -> st.SearchStrategy[Operation]:
        fresh_id = st.builds(self.fresh_id)
        creates = st.builds(
            TransferRequest,
            id=fresh_id,
            debit_account=st.sampled_from(["external:src"] * 3 + [d for d, _ in ACCOUNT_PAIRS]),
            credit_account=st.sampled_from(sorted(ACCOUNTS)),
            amount=amounts,
            kind=st.just(TransferKind.CORRECTION),
            pending=st.booleans(),
        ).filter(lambda request: request.debit_account != request.credit_account)
        creates = creates.flatmap(
            lambda request: st.sampled_from([0, 2]).map(
                lambda timeout_s: replace(request, timeout_s=timeout_s if request.pending else 0)
            )
        )
        options = [creates, creates]
        if self.reference.created:
            known = sorted(self.reference.created)
            unresolved = sorted(set(self.reference.pendings) - set(self.reference.resolved))
            # Mostly unresolved pending transfers, sometimes any transfer at all.
            pending_ids = st.one_of(st.sampled_from(unresolved or known), st.sampled_from(known))
            resolution_id = st.one_of(*[fresh_id] * 7, st.sampled_from(known))
            post = st.builds(PostPending, id=resolution_id, pending_id=pending_ids, amount=st.none() | amounts)
            options += [
                post,
                post,
                st.builds(VoidPending, id=resolution_id, pending_id=pending_ids),
                st.builds(ExpirePending, id=resolution_id, pending_id=pending_ids),
                st.sampled_from([self.reference.created[key] for key in known]),  # an exact retry
                st.sampled_from(known).map(self.changed_retry),
            ]
        return st.one_of(options)

    def changed_retry(self, transfer_id: str) -> Operation:
        operation = self.reference.created[transfer_id]
        if isinstance(operation, TransferRequest):
            return replace(operation, amount=operation.amount + 1)
        return replace(operation, pending_id=operation.id + "-other")

    def expect(self, batch: list[Operation]) -> list[ResultCode]:
        """The reference's codes for one all-or-nothing batch; the reference moves only if it all succeeds."""
        hypothetical = copy.deepcopy(self.reference)
        expected: list[ResultCode] = []
        for index, operation in enumerate(batch):
            code = hypothetical.expected(operation, self.now_us)
            expected.append(code)
            if code is ResultCode.CREATED:
                hypothetical.apply(operation, self.now_us)
            elif code is not ResultCode.EXISTS:
                expected = [ResultCode.LINKED_EVENT_FAILED] * len(batch)
                expected[index] = code  # all-or-nothing: only the failing operation keeps its code
                break
        else:
            self.reference = hypothetical
        for code in expected:
            event(str(code))  # shown by --hypothesis-show-statistics: is every path exercised?
        return expected

    @rule(data=st.data(), size=st.sampled_from([1, 1, 2, 3]))
    def submit(self, data: st.DataObject, size: int) -> None:
        batch = [data.draw(self.operations()) for _ in range(size)]
        expected = self.expect(batch)
        results = book.create_transfers(self.session, batch, now_us=self.now_us)
        assert [result.code for result in results] == expected, batch

    @rule(seconds=st.integers(min_value=0, max_value=3))
    def advance_clock(self, seconds: int) -> None:
        self.now_us += seconds * SECOND_US

    @invariant()
    def ledger_balances(self) -> None:
        accounts = tables.accounts.c
        rows = self.session.execute(
            select(accounts.id, accounts.debits_pending, accounts.debits_posted, accounts.credits_pending,
                   accounts.credits_posted)
        )
        balances = {row[0]: list(row[1:]) for row in rows}
        assert balances == self.reference.balances
        totals = [sum(balance[column] for balance in balances.values()) for column in range(4)]
        assert totals[0] == totals[2], "pending debits != pending credits"
        assert totals[1] == totals[3], "posted debits != posted credits"
        for account_id in NO_OVERDRAFT:
            debits_pending, debits_posted, _, credits_posted = balances[account_id]
            assert debits_pending + debits_posted <= credits_posted, f"{account_id} overdrawn"

    def teardown(self) -> None:
        pending_ids = self.session.scalars(
            select(tables.transfers.c.pending_id).where(tables.transfers.c.pending_id.isnot(None))
        )
        assert max(Counter(pending_ids).values(), default=0) <= 1, "a pending transfer was resolved twice"
        assert book.verify_chain(self.session).ok
        assert book.verify_balances(self.session).ok
        self.session.rollback()


def test_random_operations_keep_the_ledger_balanced(session: Session) -> None:
    run_state_machine_as_test(
        lambda: LedgerMachine(session),
        settings=settings(max_examples=40, stateful_step_count=30, deadline=None),
    )
