"""Claw-backs: credits already posted to an operator, taken back after one of its node's jobs
fails a check, and the debt left when its balance cannot cover them.

A claw-back debits the operator's available balance first; the rest is debited from the
operator's debt account (`debt:operator:<id>`, which may go negative: its negative balance is
what the operator owes). Credits posted to the operator later repay the debt first
(repay_debt), before any epoch can sweep them out. Both are plain transfers to the treasury's
claw-back account, so `mlxnet ledger audit` balances as for any other transfer. The split is
decided by the pure rules below; ids come from the caller, so a retry moves nothing twice and
answers the split made the first time.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.ids import OperatorId
from ledger.book import balance, create_transfers, ensure_account, get_transfers
from ledger.jobs import ensure_system_accounts, open_operator_account, operator_account_id
from ledger.model import OK_CODES, AccountKind, Operation, TransferKind, TransferRequest

CLAWBACKS_ACCOUNT = "treasury:clawbacks"


@dataclass(frozen=True)
class ClawBack:
    taken: int  # from the operator's balance now
    owed: int  # left as a debt, repaid from its next credits


def clawback_split(amount: int, available: int) -> ClawBack:
    """Pure: take what the balance has, owe the rest."""
    assert amount >= 0
    taken = min(amount, max(0, available))
    return ClawBack(taken, amount - taken)


def debt_repayment(owed: int, available: int) -> int:
    """Pure: what a balance repays of a debt now (all of it, if it can)."""
    assert owed >= 0
    return min(owed, max(0, available))


def debt_account_id(operator_id: OperatorId) -> str:
    return f"debt:{operator_account_id(operator_id)}"


def _accounts(session: Session, operator_id: OperatorId) -> None:
    ensure_system_accounts(session)
    for account_id, kind in ((CLAWBACKS_ACCOUNT, AccountKind.TREASURY),
                             (debt_account_id(operator_id), AccountKind.DEBT)):
        code = ensure_account(session, account_id, kind)
        assert code in OK_CODES, f"account {account_id} is misconfigured: {code}"
    open_operator_account(session, operator_id)


def operator_debt(session: Session, operator_id: OperatorId) -> int:
    """Base units the operator still owes from claw-backs."""
    found = balance(session, debt_account_id(operator_id))
    return 0 if found is None else max(0, -found.net_posted)


def claw_back(session: Session, operator_id: OperatorId, clawback_id: str, amount: int) -> ClawBack:
    """Take `amount` back from the operator: its balance first, a debt for the rest."""
    if amount == 0:
        return ClawBack(0, 0)
    done = get_transfers(session, [f"{clawback_id}:taken", f"{clawback_id}:owed"])
    if done:  # a retry: the split was decided once, by the balance then
        return ClawBack(*(done[f"{clawback_id}:{part}"].amount if f"{clawback_id}:{part}" in done else 0
                          for part in ("taken", "owed")))
    _accounts(session, operator_id)
    found = balance(session, operator_account_id(operator_id))
    split = clawback_split(amount, 0 if found is None else found.available)
    operations: list[Operation] = []
    for suffix, debit_account, part in (("taken", operator_account_id(operator_id), split.taken),
                                        ("owed", debt_account_id(operator_id), split.owed)):
        if part > 0:
            operations.append(TransferRequest(id=f"{clawback_id}:{suffix}", debit_account=debit_account,
                                              credit_account=CLAWBACKS_ACCOUNT, amount=part,
                                              kind=TransferKind.CLAWBACK))
    results = create_transfers(session, operations)
    assert all(r.code in OK_CODES for r in results), f"claw-back {clawback_id} refused: {results}"
    return split


def repay_debt(session: Session, operator_id: OperatorId, repayment_id: str) -> int:
    """Repay what the operator owes from its balance, as far as it reaches; base units repaid."""
    owed = operator_debt(session, operator_id)
    if owed == 0:
        return 0
    found = balance(session, operator_account_id(operator_id))
    amount = debt_repayment(owed, 0 if found is None else found.available)
    if amount == 0:
        return 0
    (result,) = create_transfers(session, [TransferRequest(
        id=repayment_id, debit_account=operator_account_id(operator_id),
        credit_account=debt_account_id(operator_id), amount=amount, kind=TransferKind.DEBT_REPAYMENT)])
    assert result.code in OK_CODES, f"debt repayment {repayment_id} refused: {result.code}"
    return amount
