"""The SQL shell for accounts, transfers and the chain head, through the caller's Session.

Locking: every write first updates the one-row chain head. On PostgreSQL that row lock
serialises ledger writers until the caller commits, which keeps the hash chain linear;
on SQLite the same UPDATE takes the database's write lock up front, so the reads that
follow cannot go stale. Nothing here commits or rolls back. Each statement has one form,
the same on every database.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import BigInteger, Row, bindparam, exists, func, insert, or_, select, update
from sqlalchemy.orm import Session

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
from ledger.storage import tables
from ledger.storage.among import among, json_ids

_HEAD = tables.chain_head
_ACCOUNTS = tables.accounts
_TRANSFERS = tables.transfers
_TRANSFER_COLUMNS = ("id", "sequence", "debit_account", "credit_account", "amount", "state", "pending_id",
                     "timeout_s", "job_id", "kind", "policy_version", "created_at_us", "prev_hash", "hash")
assert _TRANSFER_COLUMNS == tuple(_TRANSFERS.columns.keys()), "_transfer_from_row follows the table's order"

# UPDATE ... RETURNING: one round trip takes the lock and reads the head (PostgreSQL, and SQLite 3.35+).
_LOCK_HEAD = (update(_HEAD).where(_HEAD.c.id == tables.CHAIN_HEAD_ROW_ID)
              .values(last_sequence=_HEAD.c.last_sequence)
              .returning(_HEAD.c.last_sequence, _HEAD.c.last_transfer_id, _HEAD.c.last_hash))
_READ_HEAD = select(_HEAD.c.last_sequence, _HEAD.c.last_transfer_id, _HEAD.c.last_hash).where(
    _HEAD.c.id == tables.CHAIN_HEAD_ROW_ID)
_ADVANCE_HEAD = update(_HEAD).where(_HEAD.c.id == tables.CHAIN_HEAD_ROW_ID).values(
    last_sequence=bindparam("new_sequence"), last_transfer_id=bindparam("new_transfer_id"),
    last_hash=bindparam("new_hash"))
_CLOSED_UNTIL = select(tables.epochs.c.cutoff_us).order_by(tables.epochs.c.number.desc()).limit(1)
_ACCOUNT_BY_ID = select(_ACCOUNTS).where(_ACCOUNTS.c.id == bindparam("account_id"))
# One statement reads the transfers wanted by id and the resolutions of the pending ids.
_TRANSFERS_BY_ID_OR_PENDING_ID = (select(_TRANSFERS)
                                  .where(or_(among(_TRANSFERS.c.id), among(_TRANSFERS.c.pending_id, "among_pending")))
                                  .order_by(_TRANSFERS.c.sequence))
# Locked in id order, so two writers never wait on each other in opposite orders.
_ACCOUNTS_FOR_UPDATE = select(_ACCOUNTS).where(among(_ACCOUNTS.c.id)).order_by(_ACCOUNTS.c.id).with_for_update()
_ACCOUNTS_AMONG = select(_ACCOUNTS).where(among(_ACCOUNTS.c.id))
_TRANSFER_IDS_AMONG = select(_TRANSFERS.c.id).where(among(_TRANSFERS.c.id))
_TRANSFERS_AMONG = {column: select(_TRANSFERS).where(among(_TRANSFERS.c[column])).order_by(_TRANSFERS.c.sequence)
                    for column in ("id", "pending_id", "job_id")}
_INSERT_TRANSFERS = insert(_TRANSFERS)
_MOVE_BALANCES = (
    update(_ACCOUNTS)
    .where(_ACCOUNTS.c.id == bindparam("account_id"))
    .values(
        debits_pending=_ACCOUNTS.c.debits_pending + bindparam("debits_pending"),
        debits_posted=_ACCOUNTS.c.debits_posted + bindparam("debits_posted"),
        credits_pending=_ACCOUNTS.c.credits_pending + bindparam("credits_pending"),
        credits_posted=_ACCOUNTS.c.credits_posted + bindparam("credits_posted"),
    )
)


def lock_chain_head(session: Session) -> ChainHead:
    """Take the ledger's write lock (a no-op UPDATE of the head row) and read the head."""
    head = session.execute(_LOCK_HEAD).one_or_none()
    if head is None:
        raise _not_installed()
    return ChainHead(*head)


def _not_installed() -> LedgerNotInstalledError:
    return LedgerNotInstalledError(
        "the ledger chain head row is missing: run `alembic upgrade head` (revision 0002_ledger)"
        " or ledger.api.metadata.create_all(engine)"
    )


def read_chain_head(session: Session) -> ChainHead:
    head = session.execute(_READ_HEAD).one_or_none()
    if head is None:
        raise _not_installed()
    return ChainHead(*head)


_STATES = {str(state): state for state in TransferState}
_KINDS = {str(kind): kind for kind in TransferKind}


def _transfer_from_row(row: Row | tuple[Any, ...]) -> Transfer:
    (transfer_id, sequence, debit_account, credit_account, amount, state, pending_id, timeout_s, job_id, kind,
     policy_version, created_at_us, prev_hash, link_hash) = row
    return Transfer(sequence, transfer_id, debit_account, credit_account, amount, _STATES[state], pending_id,
                    timeout_s, job_id, _KINDS[kind], policy_version, created_at_us, prev_hash, link_hash)


def _transfer_to_values(transfer: Transfer) -> tuple[object, ...]:
    """The row in table column order; plain str for the enums, so no driver adapts them by member name."""
    return (transfer.id, transfer.sequence, transfer.debit_account, transfer.credit_account, transfer.amount,
            str(transfer.state), transfer.pending_id, transfer.timeout_s, transfer.job_id, str(transfer.kind),
            transfer.policy_version, transfer.created_at_us, transfer.prev_hash, transfer.hash)


def _transfer_to_row(transfer: Transfer) -> dict[str, object]:
    return dict(zip(_TRANSFER_COLUMNS, _transfer_to_values(transfer), strict=True))


def _account_from_row(row: Row | tuple[Any, ...]) -> Account:
    (account_id, kind, debits_must_not_exceed_credits, created_at_us, debits_pending, debits_posted,
     credits_pending, credits_posted) = row
    balance = Balance(debits_pending, debits_posted, credits_pending, credits_posted)
    return Account(account_id, AccountKind(kind), bool(debits_must_not_exceed_credits), created_at_us, balance)


def lock_and_load_snapshot(session: Session, operations: Sequence[Operation]) -> Snapshot:
    """Take the write lock (lock_chain_head), then read every row the batch may touch.

    The transfers wanted by id and the resolutions of the pending ids come in one read;
    the accounts named by the operations are locked in a second, and those of pending
    transfers that were not named (a release names none) in a third.
    """
    head = lock_chain_head(session)
    ids = {operation.id for operation in operations}
    pending_ids = {operation.pending_id for operation in operations if not isinstance(operation, TransferRequest)}
    named_account_ids = {account_id for operation in operations
                         for account_id in (getattr(operation, "debit_account", None),
                                            getattr(operation, "credit_account", None))}
    wanted_ids = ids | pending_ids
    found = _transfers_by_id_or_pending_id(session, wanted_ids, pending_ids)
    # One read for both: a row may be wanted by its id, as the resolution of a pending id, or both.
    known = {transfer.id: transfer for transfer in found if transfer.id in wanted_ids}
    resolutions = {transfer.pending_id: transfer for transfer in found if transfer.pending_id in pending_ids}
    locked = _accounts_for_update(session, named_account_ids)
    found_pending = [known[pending_id] for pending_id in pending_ids if pending_id in known]
    unnamed = {account_id for pending in found_pending
               for account_id in (pending.debit_account, pending.credit_account)} - locked.keys()
    if unnamed:
        # Every writer holds the head lock before any account lock, so a second batch of
        # account locks cannot deadlock with another ledger writer.
        locked.update(_accounts_for_update(session, unnamed))
    return Snapshot(head=head, transfers=known, resolutions=resolutions, accounts=locked,
                    closed_until_us=closed_until_us(session))


def closed_until_us(session: Session) -> int:
    """The cutoff of the last closed epoch (0 before the first close)."""
    return session.execute(_CLOSED_UNTIL).scalar_one_or_none() or 0


def _rows_among(session: Session, statement: Any, values: Iterable[object]) -> Sequence[Row]:
    """The rows of a statement whose `among` set is these text values (none for an empty set)."""
    ids = json_ids(values)
    return () if ids == "[]" else session.execute(statement, {"among": ids}).all()


def _transfers_by_id_or_pending_id(session: Session, ids: set[str], pending_ids: set[str]) -> list[Transfer]:
    """Transfers whose id is among ids or whose pending_id is among pending_ids, in chain order."""
    rows = session.execute(_TRANSFERS_BY_ID_OR_PENDING_ID, {"among": json_ids(ids),
                                                            "among_pending": json_ids(pending_ids)})
    return [_transfer_from_row(row) for row in rows]


def _transfers_where(session: Session, column: str, values: Iterable[str]) -> list[Transfer]:
    """Transfers whose column (id, pending_id or job_id) is among the values, in chain order."""
    return [_transfer_from_row(row) for row in _rows_among(session, _TRANSFERS_AMONG[column], values)]


def _accounts_for_update(session: Session, account_ids: Iterable[str | None]) -> dict[str, Account]:
    return {row.id: _account_from_row(row) for row in _rows_among(session, _ACCOUNTS_FOR_UPDATE, account_ids)}


@contextlib.contextmanager
def transfer_writer(session: Session) -> Iterator[Callable[[Sequence[Transfer]], None]]:
    """A sink for new transfers, in chain order; on PostgreSQL they stream into one COPY.

    The one statement kept in a second form: psycopg sends an executemany INSERT as one
    statement per row. With COPY, batched payments on PostgreSQL ran at 2,650-2,790 a
    second (73 us client CPU a job) against 1,460-1,770 (133-136 us) without it, in
    alternated runs of bench.ledger's batched phase on a loaded machine; its target is
    5,000 a second. The server stores the rows sent so far while the caller works out the next ones.
    Elsewhere the rows are inserted when the block ends. A failure inside the block aborts
    the write; the caller's transaction rolls back.
    """
    if _psycopg(session):
        with session.connection().connection.driver_connection.cursor() as cursor, \
                cursor.copy(_COPY_TRANSFERS) as copy:
            copy.set_types(_COPY_TYPES)
            write_row = copy.write_row

            def send(transfers: Sequence[Transfer]) -> None:
                for transfer in transfers:
                    write_row(_transfer_to_values(transfer))

            yield send
        return
    gathered: list[Transfer] = []
    yield gathered.extend
    if gathered:
        session.execute(_INSERT_TRANSFERS, [_transfer_to_row(transfer) for transfer in gathered])


def _psycopg(session: Session) -> bool:
    dialect = session.get_bind().dialect
    return dialect.name == "postgresql" and dialect.driver == "psycopg"


_COPY_TRANSFERS = f"COPY {_TRANSFERS.name} ({', '.join(_TRANSFER_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_COPY_TYPES = ["int8" if isinstance(column.type, BigInteger) else "text" for column in _TRANSFERS.columns]


def write(session: Session, evaluation: Evaluation) -> None:
    """Move the balances and advance the chain head, a statement each (transfer_writer
    has inserted the new transfers)."""
    if not evaluation.new_transfers:
        return
    # Relative updates: even a writer that skipped the head lock could not lose an update.
    changes = [
        dict(account_id=account_id, debits_pending=change.debits_pending, debits_posted=change.debits_posted,
             credits_pending=change.credits_pending, credits_posted=change.credits_posted)
        for account_id, change in sorted(evaluation.balance_changes.items())
    ]
    if changes:
        updated = session.execute(_MOVE_BALANCES, changes)
        assert updated.rowcount in (len(changes), -1), "an account vanished while locked"
    last = evaluation.new_transfers[-1]
    session.execute(_ADVANCE_HEAD, {"new_sequence": last.sequence, "new_transfer_id": last.id,
                                    "new_hash": last.hash})


def read_account(session: Session, account_id: str) -> Account | None:
    row = session.execute(_ACCOUNT_BY_ID, {"account_id": account_id}).one_or_none()
    return None if row is None else _account_from_row(row)


def lock_and_read_accounts(session: Session, account_ids: Iterable[str]) -> dict[str, Account]:
    """Take the write lock (lock_chain_head), then read_accounts."""
    lock_chain_head(session)
    return read_accounts(session, account_ids)


def read_accounts(session: Session, account_ids: Iterable[str]) -> dict[str, Account]:
    return {row.id: _account_from_row(row) for row in _rows_among(session, _ACCOUNTS_AMONG, account_ids)}


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


def operator_credit_totals(session: Session) -> tuple[int, int]:
    """(credits posted, credits pending) summed over every operator account: what the network paid and holds."""
    query = select(func.sum(_ACCOUNTS.c.credits_posted), func.sum(_ACCOUNTS.c.credits_pending)).where(
        _ACCOUNTS.c.kind == str(AccountKind.OPERATOR))
    posted, pending = session.execute(query).one()
    return int(posted or 0), int(pending or 0)


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
    found = _transfers_where(session, "id", [transfer_id])
    return found[0] if found else None


def existing_transfer_ids(session: Session, transfer_ids: Iterable[str]) -> set[str]:
    """Which of these ids name a stored transfer (no rows decoded)."""
    return {row.id for row in _rows_among(session, _TRANSFER_IDS_AMONG, transfer_ids)}


def read_transfers(session: Session, transfer_ids: Iterable[str]) -> dict[str, Transfer]:
    return {transfer.id: transfer for transfer in _transfers_where(session, "id", transfer_ids)}


def read_resolution(session: Session, pending_id: str) -> Transfer | None:
    found = _transfers_where(session, "pending_id", [pending_id])
    return found[0] if found else None


def transfers_for_job(session: Session, job_id: str) -> list[Transfer]:
    return _transfers_where(session, "job_id", [job_id])


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


_SCAN_COLUMNS = ", ".join(["sequence", *(name for name in _TRANSFER_COLUMNS if name != "sequence")])


def transfer_row_pages(session: Session, after_sequence: int, page_size: int) -> Iterator[list[tuple[Any, ...]]]:
    """Raw rows (sequence, id, debit_account, ..., prev_hash, hash) after a sequence, in chain order, in pages.

    One query streamed through the driver's own cursor, so no per-row objects are built; on
    PostgreSQL (psycopg) a server-side cursor keeps memory bounded, and its rows come binary
    (integers as int8, not text to parse). For audits over millions of rows.
    """
    assert type(after_sequence) is int and page_size > 0
    query = (f"SELECT {_SCAN_COLUMNS} FROM {_TRANSFERS.name} WHERE sequence > {after_sequence}"
             " ORDER BY sequence")
    driver_connection = session.connection().connection.driver_connection
    postgres = session.get_bind().dialect.name == "postgresql"
    cursor = driver_connection.cursor(name="ledger_transfer_scan", binary=True) if postgres \
        else driver_connection.cursor()
    try:
        cursor.execute(query)
        pages = iter(lambda: cursor.fetchmany(page_size), [])
        yield from _read_ahead(pages) if postgres else pages
    finally:
        cursor.close()


_DONE = object()


def _read_ahead(pages: Iterator[list[tuple[Any, ...]]]) -> Iterator[list[tuple[Any, ...]]]:
    """The pages, each fetched on a thread while the caller works through the one before.

    The server reads and sends the next page while the client hashes this one. Only the
    thread touches the cursor until it has finished, which happens before this returns.
    """
    ready: queue.Queue[object] = queue.Queue(maxsize=2)
    stop = threading.Event()
    failure: list[BaseException] = []

    def fetch() -> None:
        try:
            for page in pages:
                while not stop.is_set():
                    try:
                        ready.put(page, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread, re-raised there
            failure.append(error)
        finally:
            ready.put(_DONE)  # the caller takes pages until it sees this, or stops reading

    fetcher = threading.Thread(target=fetch, name="ledger-audit-read-ahead", daemon=True)
    fetcher.start()
    try:
        while (page := ready.get()) is not _DONE:
            yield page  # type: ignore[misc]
        if failure:
            raise failure[0]
    finally:
        stop.set()
        while fetcher.is_alive():  # make room for its last put, then wait for it
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.1)
        fetcher.join()


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

