"""Claw-backs: a posted credit taken back after a failed check, the balance first and a debt for the
rest, repaid from the operator's next credits; the books still balance."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from contracts.ids import OperatorId
from ledger import api
from ledger.jobs import ISSUANCE_REWARDS_ACCOUNT, ensure_system_accounts, open_operator_account, operator_account_id
from ledger.book import balance, create_transfer
from ledger.model import ResultCode, TransferKind, TransferRequest

BOB = OperatorId("bob")


def _credit(session: Session, transfer_id: str, amount: int) -> None:
    ensure_system_accounts(session)
    open_operator_account(session, BOB)
    result = create_transfer(session, TransferRequest(id=transfer_id, debit_account=ISSUANCE_REWARDS_ACCOUNT,
                                                      credit_account=operator_account_id(BOB), amount=amount,
                                                      kind=TransferKind.JOB_OPERATOR_CREDIT))
    assert result.code is ResultCode.CREATED


def _available(session: Session) -> int:
    found = balance(session, operator_account_id(BOB))
    return 0 if found is None else found.available


@given(st.integers(0, 10**15), st.integers(-(10**15), 10**15))
def test_a_clawback_takes_what_the_balance_has_and_owes_the_rest(amount: int, available: int) -> None:
    split = api.clawback_split(amount, available)
    assert split.taken + split.owed == amount and 0 <= split.taken <= max(0, available)
    assert split.owed == 0 or split.taken == max(0, available)


@given(st.integers(0, 10**15), st.integers(-(10**15), 10**15))
def test_a_repayment_never_exceeds_the_debt_or_the_balance(owed: int, available: int) -> None:
    repaid = api.debt_repayment(owed, available)
    assert 0 <= repaid <= owed and repaid <= max(0, available)
    assert repaid == min(owed, max(0, available))


def test_a_clawback_beyond_the_balance_is_a_debt_repaid_from_later_credits(session: Session) -> None:
    _credit(session, "credit-1", 300)
    split = api.claw_back(session, BOB, "clawback:job-1", 1_000)
    assert (split.taken, split.owed) == (300, 700)
    assert _available(session) == 0 and api.operator_debt(session, BOB) == 700
    assert api.claw_back(session, BOB, "clawback:job-1", 1_000) == split  # a retry moves nothing
    assert api.operator_debt(session, BOB) == 700
    _credit(session, "credit-2", 500)
    assert api.repay_debt(session, BOB, "debt-repaid:job-2") == 500
    assert _available(session) == 0 and api.operator_debt(session, BOB) == 200
    _credit(session, "credit-3", 1_000)
    assert api.repay_debt(session, BOB, "debt-repaid:job-3") == 200
    assert _available(session) == 800 and api.operator_debt(session, BOB) == 0
    assert api.repay_debt(session, BOB, "debt-repaid:job-4") == 0  # nothing owed, nothing moved
    report = api.audit(session)
    assert report.ok, report


def test_nothing_to_claw_back_moves_nothing(session: Session) -> None:
    assert api.claw_back(session, BOB, "clawback:job-9", 0) == api.ClawBack(0, 0)
    assert api.operator_debt(session, BOB) == 0
