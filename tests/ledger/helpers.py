"""Small builders shared by the ledger tests."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ledger import book
from ledger.storage import tables
from ledger.model import AccountKind, ResultCode, TransferKind, TransferRequest

NOW_US = 1_800_000_000_000_000  # a fixed clock: 2027-01-15, in microseconds
SOURCE = "external:deposits"
ALICE = "consumer:alice"
BOB = "operator:bob"
ESCROW = "escrow:test"


def open_accounts(session: Session) -> None:
    for account_id, kind in ((SOURCE, AccountKind.EXTERNAL), (ALICE, AccountKind.CONSUMER),
                             (BOB, AccountKind.OPERATOR), (ESCROW, AccountKind.ESCROW)):
        assert book.ensure_account(session, account_id, kind, now_us=NOW_US) is ResultCode.CREATED


def fund(session: Session, account_id: str, amount: int, transfer_id: str = "deposit-1") -> None:
    request = TransferRequest(
        id=transfer_id, debit_account=SOURCE, credit_account=account_id, amount=amount, kind=TransferKind.DEPOSIT
    )
    assert book.create_transfer(session, request, now_us=NOW_US).code is ResultCode.CREATED


def reserve(
    session: Session, transfer_id: str, amount: int, *, timeout_s: int = 0, now_us: int = NOW_US
) -> ResultCode:
    request = TransferRequest(
        id=transfer_id,
        debit_account=ALICE,
        credit_account=ESCROW,
        amount=amount,
        kind=TransferKind.JOB_RESERVE,
        pending=True,
        timeout_s=timeout_s,
    )
    return book.create_transfer(session, request, now_us=now_us).code


def transfer_count(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(tables.transfers)) or 0
