"""The SQL shell: the only ledger module that reads or writes rows, through the caller's Session.

Locking: every write first updates the one-row chain head. On PostgreSQL that row lock
serialises ledger writers until the caller commits, which keeps the hash chain linear;
on SQLite the same UPDATE takes the database's write lock up front, so the reads that
follow cannot go stale. Nothing here commits or rolls back.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Row, exists, insert, select, update
from sqlalchemy.orm import Session

from ledger import tables
from ledger.errors import LedgerNotInstalledError
from ledger.model import (
    MICROSECONDS_PER_SECOND,
    Account,
    AccountKind,
    Balance,
    ChainHead,
    Operation,
    Transfer,
    TransferKind,
    TransferRequest,
    TransferState,
)
from ledger.rules import Evaluation, Snapshot

_HEAD = tables.chain_head
_ACCOUNTS = tables.accounts
_TRANSFERS = tables.transfers


def lock_chain_head(session: Session) -> ChainHead:
    """Take the ledger's write lock (a no-op UPDATE of the head row) and read the head."""
    touched = session.execute(
        update(_HEAD)
        .where(_HEAD.c.id == tables.CHAIN_HEAD_ROW_ID)
        .values(last_sequence=_HEAD.c.last_sequence)
    )
    if touched.rowcount != 1:
        raise LedgerNotInstalledError(
            "the ledger chain head row is missing: run `alembic upgrade head` (revision 0002_ledger)"
            " or ledger.tables.metadata.create_all(engine)"
        )
    return _read_head(session, for_update=True)


def read_chain_head(session: Session) -> ChainHead:
    return _read_head(session, for_update=False)


def _read_head(session: Session, for_update: bool) -> ChainHead:
    query = select(_HEAD).where(_HEAD.c.id == tables.CHAIN_HEAD_ROW_ID)
    if for_update:
        query = query.with_for_update()
    row = session.execute(query).one_or_none()
    if row is None:
        raise LedgerNotInstalledError("the ledger chain head row is missing: run the 0002_ledger migration")
    return ChainHead(row.last_sequence, row.last_transfer_id, row.last_hash)


def _transfer_from_row(row: Row) -> Transfer:
    fields = dict(row._mapping)
    fields["state"] = TransferState(fields["state"])
    fields["kind"] = TransferKind(fields["kind"])
    return Transfer(**fields)


def _transfer_to_row(transfer: Transfer) -> dict[str, object]:
    # Plain str for the enums, so no driver ever adapts them by member name.
    row = {column.name: getattr(transfer, column.name) for column in _TRANSFERS.columns}
    row["state"], row["kind"] = str(transfer.state), str(transfer.kind)
    return row


def _account_from_row(row: Row) -> Account:
    balance = Balance(row.debits_pending, row.debits_posted, row.credits_pending, row.credits_posted)
    return Account(row.id, AccountKind(row.kind), bool(row.debits_must_not_exceed_credits), row.created_at_us, balance)


def load_snapshot(session: Session, operations: Sequence[Operation], head: ChainHead) -> Snapshot:
    """Read every row the batch may touch; call with the chain head locked."""
    ids = {operation.id for operation in operations}
    pending_ids = {operation.pending_id for operation in operations if not isinstance(operation, TransferRequest)}
    known = {transfer.id: transfer for transfer in _transfers_where(session, _TRANSFERS.c.id, ids | pending_ids)}
    resolutions = {
        transfer.pending_id: transfer for transfer in _transfers_where(session, _TRANSFERS.c.pending_id, pending_ids)
    }
    account_ids: set[str] = set()
    for operation in operations:
        if isinstance(operation, TransferRequest):
            account_ids.update((operation.debit_account, operation.credit_account))
        elif operation.pending_id in known:
            pending = known[operation.pending_id]
            account_ids.update((pending.debit_account, pending.credit_account))
    accounts = _accounts_for_update(session, account_ids)
    return Snapshot(
        head=head, transfers=known, resolutions=resolutions, accounts=accounts,
        closed_until_us=closed_until_us(session),
    )


def closed_until_us(session: Session) -> int:
    """The cutoff of the last closed epoch (0 before the first close)."""
    query = select(tables.epochs.c.cutoff_us).order_by(tables.epochs.c.number.desc()).limit(1)
    return session.execute(query).scalar_one_or_none() or 0


def _transfers_where(session: Session, column: ColumnElement[Any], values: Iterable[str]) -> list[Transfer]:
    wanted = sorted(value for value in values if isinstance(value, str))
    if not wanted:
        return []
    rows = session.execute(select(_TRANSFERS).where(column.in_(wanted)).order_by(_TRANSFERS.c.sequence))
    return [_transfer_from_row(row) for row in rows]


def _accounts_for_update(session: Session, account_ids: set[str]) -> dict[str, Account]:
    ids = sorted(account_id for account_id in account_ids if isinstance(account_id, str))
    if not ids:
        return {}
    # Locked in id order, so two writers never wait on each other in opposite orders.
    query = select(_ACCOUNTS).where(_ACCOUNTS.c.id.in_(ids)).order_by(_ACCOUNTS.c.id).with_for_update()
    return {row.id: _account_from_row(row) for row in session.execute(query)}


def write(session: Session, evaluation: Evaluation) -> None:
    """Insert the new transfers, move the balances and advance the chain head."""
    assert evaluation.ok, "only a fully successful batch is written"
    if not evaluation.new_transfers:
        return
    session.execute(insert(_TRANSFERS), [_transfer_to_row(transfer) for transfer in evaluation.new_transfers])
    for account_id, change in sorted(evaluation.balance_changes.items()):
        # Relative updates: even a writer that skipped the head lock could not lose an update.
        updated = session.execute(
            update(_ACCOUNTS)
            .where(_ACCOUNTS.c.id == account_id)
            .values(
                debits_pending=_ACCOUNTS.c.debits_pending + change.debits_pending,
                debits_posted=_ACCOUNTS.c.debits_posted + change.debits_posted,
                credits_pending=_ACCOUNTS.c.credits_pending + change.credits_pending,
                credits_posted=_ACCOUNTS.c.credits_posted + change.credits_posted,
            )
        )
        assert updated.rowcount == 1, f"account {account_id} vanished while locked"
    last = evaluation.new_transfers[-1]
    session.execute(
        update(_HEAD)
        .where(_HEAD.c.id == tables.CHAIN_HEAD_ROW_ID)
        .values(last_sequence=last.sequence, last_transfer_id=last.id, last_hash=last.hash)
    )


def read_account(session: Session, account_id: str) -> Account | None:
    row = session.execute(select(_ACCOUNTS).where(_ACCOUNTS.c.id == account_id)).one_or_none()
    return None if row is None else _account_from_row(row)


def read_accounts(session: Session, account_ids: list[str]) -> dict[str, Account]:
    """The accounts that exist among account_ids, by id, in one query."""
    rows = session.execute(select(_ACCOUNTS).where(_ACCOUNTS.c.id.in_(account_ids)))
    return {row.id: _account_from_row(row) for row in rows}


def insert_account(
    session: Session, account_id: str, kind: AccountKind, debits_must_not_exceed_credits: bool, now_us: int
) -> None:
    session.execute(
        insert(_ACCOUNTS).values(
            id=account_id,
            kind=str(kind),
            debits_must_not_exceed_credits=debits_must_not_exceed_credits,
            created_at_us=now_us,
            debits_pending=0,
            debits_posted=0,
            credits_pending=0,
            credits_posted=0,
        )
    )


def scan_accounts(session: Session, batch_size: int) -> Iterator[Account]:
    """Every account in id order, a page at a time, so memory stays bounded."""
    assert batch_size > 0
    after = ""
    while True:
        query = select(_ACCOUNTS).where(_ACCOUNTS.c.id > after).order_by(_ACCOUNTS.c.id).limit(batch_size)
        page = [_account_from_row(row) for row in session.execute(query)]
        yield from page
        if len(page) < batch_size:
            return
        after = page[-1].id


def read_transfer(session: Session, transfer_id: str) -> Transfer | None:
    found = _transfers_where(session, _TRANSFERS.c.id, [transfer_id])
    return found[0] if found else None


def read_resolution(session: Session, pending_id: str) -> Transfer | None:
    found = _transfers_where(session, _TRANSFERS.c.pending_id, [pending_id])
    return found[0] if found else None


def transfers_for_job(session: Session, job_id: str) -> list[Transfer]:
    return _transfers_where(session, _TRANSFERS.c.job_id, [job_id])


def scan_transfers(session: Session, batch_size: int) -> Iterator[Transfer]:
    """Every transfer in chain order, a page at a time (keyset on sequence)."""
    assert batch_size > 0
    after = 0
    while True:
        query = (
            select(_TRANSFERS)
            .where(_TRANSFERS.c.sequence > after)
            .order_by(_TRANSFERS.c.sequence)
            .limit(batch_size)
        )
        page = [_transfer_from_row(row) for row in session.execute(query)]
        yield from page
        if len(page) < batch_size:
            return
        after = page[-1].sequence


def expired_pending_ids(session: Session, now_us: int, limit: int) -> list[str]:
    """Pending transfers past their timeout and not yet resolved, oldest first."""
    resolution = _TRANSFERS.alias("resolution")
    expires_at_us = _TRANSFERS.c.created_at_us + _TRANSFERS.c.timeout_s * MICROSECONDS_PER_SECOND
    query = (
        select(_TRANSFERS.c.id)
        .where(_TRANSFERS.c.state == str(TransferState.PENDING))
        .where(_TRANSFERS.c.timeout_s > 0)
        .where(expires_at_us <= now_us)
        .where(~exists().where(resolution.c.pending_id == _TRANSFERS.c.id))
        .order_by(_TRANSFERS.c.sequence)
        .limit(limit)
    )
    return list(session.scalars(query))

