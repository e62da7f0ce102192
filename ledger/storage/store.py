"""The SQL shell: the only ledger module that reads or writes rows, through the caller's Session.

Locking: every write first updates the one-row chain head. On PostgreSQL that row lock
serialises ledger writers until the caller commits, which keeps the hash chain linear;
on SQLite the same UPDATE takes the database's write lock up front, so the reads that
follow cannot go stale. Nothing here commits or rolls back.
"""

from __future__ import annotations

import contextlib
import functools
import json
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import (
    ARRAY, BigInteger, ColumnElement, Row, Select, String, Table, any_, bindparam, exists, func, insert, select,
    update,
)
from sqlalchemy.orm import Session

from ledger.storage import tables
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
IN_CHUNK = 500  # ids per IN (...) list, well under every driver's parameter limit
_TRANSFER_COLUMNS = ("id", "sequence", "debit_account", "credit_account", "amount", "state", "pending_id",
                     "timeout_s", "job_id", "kind", "policy_version", "created_at_us", "prev_hash", "hash")
assert _TRANSFER_COLUMNS == tuple(_TRANSFERS.columns.keys()), "_transfer_to_values follows the table's order"


# Statements every ledger call runs are built once: a reused statement skips SQLAlchemy's
# per-call construction and cache-key work (about 0.1 ms each on a single payment's path).
_TOUCH_HEAD = update(_HEAD).where(_HEAD.c.id == tables.CHAIN_HEAD_ROW_ID).values(last_sequence=_HEAD.c.last_sequence)
_TOUCH_HEAD_RETURNING = _TOUCH_HEAD.returning(_HEAD.c.last_sequence, _HEAD.c.last_transfer_id, _HEAD.c.last_hash)
_ADVANCE_HEAD = update(_HEAD).where(_HEAD.c.id == tables.CHAIN_HEAD_ROW_ID).values(
    last_sequence=bindparam("new_sequence"), last_transfer_id=bindparam("new_transfer_id"),
    last_hash=bindparam("new_hash"))
_CLOSED_UNTIL = select(tables.epochs.c.cutoff_us).order_by(tables.epochs.c.number.desc()).limit(1)
_INSERT_TRANSFERS = insert(_TRANSFERS)
_ACCOUNT_BY_ID = select(_ACCOUNTS).where(_ACCOUNTS.c.id == bindparam("account_id"))


def lock_chain_head(session: Session) -> ChainHead:
    """Take the ledger's write lock (a no-op UPDATE of the head row) and read the head."""
    if session.get_bind().dialect.update_returning:
        # One round trip instead of two: every ledger call starts here.
        head = session.execute(_TOUCH_HEAD_RETURNING).one_or_none()
        if head is None:
            raise _not_installed()
        return ChainHead(head.last_sequence, head.last_transfer_id, head.last_hash)
    if session.execute(_TOUCH_HEAD).rowcount != 1:
        raise _not_installed()
    return _read_head(session, for_update=True)


def _not_installed() -> LedgerNotInstalledError:
    return LedgerNotInstalledError(
        "the ledger chain head row is missing: run `alembic upgrade head` (revision 0002_ledger)"
        " or ledger.storage.tables.metadata.create_all(engine)"
    )


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


_STATES = {str(state): state for state in TransferState}
_KINDS = {str(kind): kind for kind in TransferKind}
_TEXT: dict[TransferState | TransferKind, str] = {member: str(member) for member in (*TransferState, *TransferKind)}


def _transfer_from_row(row: Row) -> Transfer:
    # Positional, in the table's column order: snapshots of big batches read thousands of rows.
    (transfer_id, sequence, debit_account, credit_account, amount, state, pending_id, timeout_s, job_id, kind,
     policy_version, created_at_us, prev_hash, link_hash) = row
    return Transfer(sequence, transfer_id, debit_account, credit_account, amount, _STATES[state], pending_id,
                    timeout_s, job_id, _KINDS[kind], policy_version, created_at_us, prev_hash, link_hash)


def _transfer_to_values(transfer: Transfer) -> tuple[object, ...]:
    """The row in table column order; plain str for the enums, so no driver adapts them by member name."""
    return (transfer.id, transfer.sequence, transfer.debit_account, transfer.credit_account, transfer.amount,
            _TEXT[transfer.state], transfer.pending_id, transfer.timeout_s, transfer.job_id, _TEXT[transfer.kind],
            transfer.policy_version, transfer.created_at_us, transfer.prev_hash, transfer.hash)


def _transfer_to_row(transfer: Transfer) -> dict[str, object]:
    return dict(zip(_TRANSFER_COLUMNS, _transfer_to_values(transfer), strict=True))


def _account_from_row(row: Row | tuple[Any, ...]) -> Account:
    # Positional, in the table's column order, so driver tuples read the same as SQLAlchemy rows.
    (account_id, kind, debits_must_not_exceed_credits, created_at_us, debits_pending, debits_posted,
     credits_pending, credits_posted) = row
    balance = Balance(debits_pending, debits_posted, credits_pending, credits_posted)
    return Account(account_id, AccountKind(kind), bool(debits_must_not_exceed_credits), created_at_us, balance)


def lock_and_load_snapshot(session: Session, operations: Sequence[Operation]) -> Snapshot:
    """Take the write lock (lock_chain_head), then read every row the batch may touch (load_snapshot).

    On PostgreSQL through psycopg the lock and the reads go out as one pipeline, so a call
    waits for one round trip here instead of five: the statements still run in order, the
    lock first, and each round trip costs the most when the machine is busy. The accounts
    named by the operations are locked in it; those of pending transfers that were not
    named (a release names none) take a second round trip. On SQLite the same four
    statements go straight to the driver: every submit, receipt and cancel runs them, and
    SQLAlchemy's work per statement was ten times the database's.
    """
    ids = {operation.id for operation in operations}
    pending_ids = {operation.pending_id for operation in operations if not isinstance(operation, TransferRequest)}
    named_account_ids = {account_id for operation in operations
                         for account_id in (getattr(operation, "debit_account", None),
                                            getattr(operation, "credit_account", None))}
    wanted_ids = ids | pending_ids
    if _sqlite(session):
        head, found, locked, cutoff = _sqlite_snapshot_rows(session, wanted_ids, pending_ids, named_account_ids)
    elif _psycopg(session):
        head, found, locked, cutoff = _psycopg_snapshot_rows(session, wanted_ids, pending_ids, named_account_ids)
    else:
        return load_snapshot(session, operations, lock_chain_head(session))
    if head is None:
        raise _not_installed()
    # One read for both: a row may be wanted by its id, as the resolution of a pending id, or both.
    known = {transfer.id: transfer for transfer in found if transfer.id in wanted_ids}
    resolutions = {transfer.pending_id: transfer for transfer in found if transfer.pending_id in pending_ids}
    found_pending = [known[pending_id] for pending_id in pending_ids if pending_id in known]
    unnamed = {account_id for pending in found_pending
               for account_id in (pending.debit_account, pending.credit_account)} - locked.keys()
    if unnamed:
        # Every writer holds the head lock before any account lock, so a second batch of
        # account locks cannot deadlock with another ledger writer.
        locked.update(_accounts_for_update(session, unnamed))
    return Snapshot(head=ChainHead(*head), transfers=known, resolutions=resolutions, accounts=locked,
                    closed_until_us=(cutoff[0] if cutoff else None) or 0)


_SnapshotRows = tuple[tuple[Any, ...] | None, list[Transfer], dict[str, Account], tuple[Any, ...] | None]


def _psycopg_snapshot_rows(session: Session, wanted_ids: set[str], pending_ids: set[str],
                           named_account_ids: set[str | None]) -> _SnapshotRows:
    """The head (locked), the transfers wanted, the named accounts (locked) and the cutoff: one pipeline."""
    connection = session.connection().connection.driver_connection
    with connection.pipeline() as pipeline, connection.cursor() as lock, connection.cursor() as transfers, \
            connection.cursor() as accounts, connection.cursor() as closed:
        lock.execute(_LOCK_HEAD)
        transfers.execute(_TRANSFERS_BY_ID_OR_PENDING_ID, [_among_text(wanted_ids), _among_text(pending_ids)])
        accounts.execute(_ACCOUNTS_FOR_UPDATE, [_among_text(named_account_ids)])
        closed.execute(_CLOSED_UNTIL_US)
        pipeline.sync()
        return (lock.fetchone(), [_transfer_from_row(row) for row in transfers.fetchall()],
                {row[0]: _account_from_row(row) for row in accounts.fetchall()}, closed.fetchone())


def _sqlite_snapshot_rows(session: Session, wanted_ids: set[str], pending_ids: set[str],
                          named_account_ids: set[str | None]) -> _SnapshotRows:
    """The same on SQLite, whose write lock the head's UPDATE takes (or BEGIN IMMEDIATE already took)."""
    cursor = session.connection().connection.driver_connection.cursor()
    try:
        head = cursor.execute(_LOCK_HEAD).fetchone()
        found = [_transfer_from_row(row) for row in cursor.execute(
            _SQLITE_TRANSFERS_BY_ID_OR_PENDING_ID, [_json_ids(wanted_ids), _json_ids(pending_ids)])]
        locked = {row[0]: _account_from_row(row)
                  for row in cursor.execute(_SQLITE_ACCOUNTS_AMONG, [_json_ids(named_account_ids)])}
        return head, found, locked, cursor.execute(_CLOSED_UNTIL_US).fetchone()
    finally:
        cursor.close()


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
    return session.execute(_CLOSED_UNTIL).scalar_one_or_none() or 0


def _chunks(values: Iterable[object]) -> Iterator[list[str]]:
    """The text values, sorted, in IN lists short enough for every driver's parameter limit."""
    wanted = sorted({value for value in values if isinstance(value, str)})
    for start in range(0, len(wanted), IN_CHUNK):
        yield wanted[start:start + IN_CHUNK]


def _transfers_where(session: Session, column: ColumnElement[Any], values: Iterable[str]) -> list[Transfer]:
    if _psycopg(session):
        query = f"SELECT {_COLUMNS_TEXT} FROM {_TRANSFERS.name} WHERE {column.name} {_AMONG} ORDER BY sequence"
        return [_transfer_from_row(row) for row in _driver_rows_among(session, query, values)]
    found: list[Transfer] = []
    for statement, parameters in _among(session, _TRANSFERS, column.name, values, order_by="sequence"):
        rows = session.execute(statement, parameters)
        found.extend(_transfer_from_row(row) for row in rows)
    found.sort(key=lambda transfer: transfer.sequence)
    return found


def _among(session: Session, table: Table, column: str, values: Iterable[object], *,
           columns: tuple[str, ...] = (), order_by: str = "",
           for_update: bool = False) -> Iterator[tuple[Select[Any], dict[str, object]]]:
    """Statements, with their parameters, that together select the rows of table (or
    just these columns) whose column is one of the text values."""
    shape = (table, column, columns, order_by, for_update)
    dialect = session.get_bind().dialect.name
    if dialect in ("postgresql", "sqlite"):
        # One parameter, so the statement text stays the same and is parsed once: an array
        # (PostgreSQL), or a JSON list (SQLite). An expanding IN list is rendered anew on
        # every execution, and every transfer reads its accounts and transfers this way.
        wanted = sorted({value for value in values if isinstance(value, str)})
        if wanted:
            postgres = dialect == "postgresql"
            yield _select_among(*shape, form="array" if postgres else "json"), \
                {"among": wanted if postgres else json.dumps(wanted)}
        return
    for chunk in _chunks(values):
        yield _select_among(*shape, form="expanding"), {"among": chunk}


@functools.lru_cache(maxsize=64)
def _select_among(table: Table, column: str, columns: tuple[str, ...], order_by: str, for_update: bool, *,
                  form: str) -> Select[Any]:
    """Built once per shape and form: an array parameter, a JSON list read by json_each, or an
    expanding IN list."""
    chosen = select(*(table.c[name] for name in columns)) if columns else select(table)
    if form == "array":
        chosen = chosen.where(table.c[column] == any_(bindparam("among", type_=ARRAY(String))))
    elif form == "json":
        listed = func.json_each(bindparam("among", type_=String)).table_valued("value")
        chosen = chosen.where(table.c[column].in_(select(listed.c.value)))
    else:
        chosen = chosen.where(table.c[column].in_(bindparam("among", expanding=True)))
    if order_by:
        chosen = chosen.order_by(table.c[order_by])
    return chosen.with_for_update() if for_update else chosen


_COLUMNS_TEXT = ", ".join(_TRANSFER_COLUMNS)
_ACCOUNT_COLUMNS_TEXT = ", ".join(_ACCOUNTS.columns.keys())


def _psycopg(session: Session) -> bool:
    dialect = session.get_bind().dialect
    return dialect.name == "postgresql" and dialect.driver == "psycopg"


def _sqlite(session: Session) -> bool:
    return session.get_bind().dialect.driver == "pysqlite"


def _json_ids(values: Iterable[object]) -> str:
    """The text ids as one JSON list, for _SQLITE_AMONG's one parameter."""
    return json.dumps(sorted({value for value in values if isinstance(value, str)}))


def _driver_rows_among(session: Session, query: str, values: Iterable[object]) -> list[tuple[Any, ...]]:
    """PostgreSQL: the rows of `query`, whose one %s stands for the set of values, through the driver.

    Stored ids never hold a space (rules.valid_id), so the values go as one space-joined
    text that the server splits (a value with a space matches no row and is left out):
    no per-id array encoding. The rows come back in one fetch as plain tuples.
    """
    wanted = sorted({value for value in values if isinstance(value, str) and " " not in value})
    if not wanted:
        return []
    with session.connection().connection.driver_connection.cursor() as cursor:
        return cursor.execute(query, [" ".join(wanted)]).fetchall()


_AMONG = "= ANY(string_to_array(%s, ' '))"


def _among_text(values: Iterable[object]) -> str:
    """The text ids as _AMONG's one parameter (see _driver_rows_among; '' stands for none)."""
    return " ".join(sorted({value for value in values if isinstance(value, str) and " " not in value}))


_LOCK_HEAD = (f"UPDATE {_HEAD.name} SET last_sequence = last_sequence WHERE id = {tables.CHAIN_HEAD_ROW_ID}"
              " RETURNING last_sequence, last_transfer_id, last_hash")
# One statement, so the server looks through the transfers once (a scan of the table, while
# it is small enough that the planner prefers one) for the ids and the pending ids.
_TRANSFERS_BY_ID_OR_PENDING_ID = (f"SELECT {', '.join(_TRANSFER_COLUMNS)} FROM {_TRANSFERS.name}"
                                  f" WHERE id {_AMONG} OR pending_id {_AMONG} ORDER BY sequence")
# Locked in id order, so two writers never wait on each other in opposite orders.
_ACCOUNTS_FOR_UPDATE = (f"SELECT {', '.join(_ACCOUNTS.columns.keys())} FROM {_ACCOUNTS.name}"
                        f" WHERE id {_AMONG} ORDER BY id FOR UPDATE")
_ACCOUNTS_AMONG = f"SELECT {', '.join(_ACCOUNTS.columns.keys())} FROM {_ACCOUNTS.name} WHERE id {_AMONG}"
_CLOSED_UNTIL_US = f"SELECT cutoff_us FROM {tables.epochs.name} ORDER BY number DESC LIMIT 1"
# SQLite: the set of ids as one JSON list, so the statement text never changes (as _among's).
_SQLITE_AMONG = "IN (SELECT value FROM json_each(?))"
_SQLITE_TRANSFERS_BY_ID_OR_PENDING_ID = (f"SELECT {', '.join(_TRANSFER_COLUMNS)} FROM {_TRANSFERS.name}"
                                         f" WHERE id {_SQLITE_AMONG} OR pending_id {_SQLITE_AMONG}"
                                         " ORDER BY sequence")
_SQLITE_ACCOUNTS_AMONG = f"SELECT {', '.join(_ACCOUNTS.columns.keys())} FROM {_ACCOUNTS.name} WHERE id {_SQLITE_AMONG}"


def _accounts_for_update(session: Session, account_ids: set[str]) -> dict[str, Account]:
    if _psycopg(session):
        # Locked in id order, so two writers never wait on each other in opposite orders.
        query = f"SELECT {_ACCOUNT_COLUMNS_TEXT} FROM {_ACCOUNTS.name} WHERE id {_AMONG} ORDER BY id FOR UPDATE"
        return {row[0]: _account_from_row(row) for row in _driver_rows_among(session, query, account_ids)}
    accounts: dict[str, Account] = {}
    # Locked in id order, so two writers never wait on each other in opposite orders.
    for statement, parameters in _among(session, _ACCOUNTS, "id", account_ids, order_by="id", for_update=True):
        accounts.update((row.id, _account_from_row(row)) for row in session.execute(statement, parameters))
    return accounts


@contextlib.contextmanager
def transfer_writer(session: Session) -> Iterator[Callable[[Sequence[Transfer]], None]]:
    """A sink for new transfers, in chain order; on PostgreSQL they stream into one COPY.

    The server stores the rows sent so far while the caller works out the next ones, so
    its time overlaps the client's. Elsewhere the rows are inserted when the block ends.
    A failure inside the block aborts the COPY; the caller's transaction rolls back.
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
    if not gathered:
        return
    if _sqlite(session):  # straight to the driver, as the snapshot's reads (lock_and_load_snapshot)
        session.connection().connection.driver_connection.executemany(
            _SQLITE_INSERT_TRANSFERS, [_transfer_to_values(transfer) for transfer in gathered])
        return
    session.execute(_INSERT_TRANSFERS, [_transfer_to_row(transfer) for transfer in gathered])


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
    last = evaluation.new_transfers[-1]
    head = {"new_sequence": last.sequence, "new_transfer_id": last.id, "new_hash": last.hash}
    if _sqlite(session):  # straight to the driver, as the snapshot's reads (lock_and_load_snapshot)
        connection = session.connection().connection.driver_connection
        if changes:
            updated = connection.executemany(_SQLITE_MOVE_BALANCES, changes)
            assert updated.rowcount == len(changes), "an account vanished while locked"
        connection.execute(_SQLITE_ADVANCE_HEAD, head)
        return
    if changes:
        updated = session.execute(_MOVE_BALANCES, changes)
        assert updated.rowcount in (len(changes), -1), "an account vanished while locked"
    session.execute(_ADVANCE_HEAD, head)


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


_SQLITE_INSERT_TRANSFERS = (f"INSERT INTO {_TRANSFERS.name} ({', '.join(_TRANSFER_COLUMNS)})"
                            f" VALUES ({', '.join('?' * len(_TRANSFER_COLUMNS))})")
_SQLITE_MOVE_BALANCES = (f"UPDATE {_ACCOUNTS.name} SET debits_pending = debits_pending + :debits_pending,"
                         " debits_posted = debits_posted + :debits_posted,"
                         " credits_pending = credits_pending + :credits_pending,"
                         " credits_posted = credits_posted + :credits_posted WHERE id = :account_id")
_SQLITE_ADVANCE_HEAD = (f"UPDATE {_HEAD.name} SET last_sequence = :new_sequence, last_transfer_id = :new_transfer_id,"
                        f" last_hash = :new_hash WHERE id = {tables.CHAIN_HEAD_ROW_ID}")


# COPY: the fastest way into PostgreSQL (about three times executemany's rows per second).
_COPY_TRANSFERS = f"COPY {_TRANSFERS.name} ({', '.join(_TRANSFER_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_COPY_TYPES = ["int8" if isinstance(column.type, BigInteger) else "text" for column in _TRANSFERS.columns]


def read_account(session: Session, account_id: str) -> Account | None:
    row = session.execute(_ACCOUNT_BY_ID, {"account_id": account_id}).one_or_none()
    return None if row is None else _account_from_row(row)


def lock_and_read_accounts(session: Session, account_ids: Iterable[str]) -> dict[str, Account]:
    """Take the write lock (lock_chain_head), then read_accounts: one pipeline, so one round trip, on psycopg."""
    if not _psycopg(session):
        lock_chain_head(session)
        return read_accounts(session, account_ids)
    connection = session.connection().connection.driver_connection
    with connection.pipeline() as pipeline, connection.cursor() as lock, connection.cursor() as accounts:
        lock.execute(_LOCK_HEAD)
        accounts.execute(_ACCOUNTS_AMONG, [_among_text(account_ids)])
        pipeline.sync()
        if lock.fetchone() is None:
            raise _not_installed()
        return {row[0]: _account_from_row(row) for row in accounts.fetchall()}


def read_accounts(session: Session, account_ids: Iterable[str]) -> dict[str, Account]:
    accounts: dict[str, Account] = {}
    for statement, parameters in _among(session, _ACCOUNTS, "id", account_ids):
        accounts.update((row.id, _account_from_row(row)) for row in session.execute(statement, parameters))
    return accounts


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
    found = _transfers_where(session, _TRANSFERS.c.id, [transfer_id])
    return found[0] if found else None


def existing_transfer_ids(session: Session, transfer_ids: Iterable[str]) -> set[str]:
    """Which of these ids name a stored transfer (no rows decoded)."""
    wanted = list(transfer_ids)
    if _psycopg(session):
        query = f"SELECT id FROM {_TRANSFERS.name} WHERE id {_AMONG}"
        return {row[0] for row in _driver_rows_among(session, query, wanted)}
    found: set[str] = set()
    for statement, parameters in _among(session, _TRANSFERS, "id", wanted, columns=("id",)):
        found.update(session.scalars(statement, parameters))
    return found


def read_transfers(session: Session, transfer_ids: Iterable[str]) -> dict[str, Transfer]:
    return {transfer.id: transfer for transfer in _transfers_where(session, _TRANSFERS.c.id, transfer_ids)}


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


_SCAN_COLUMNS = ", ".join(["sequence", *(name for name in _TRANSFER_COLUMNS if name != "sequence")])


def transfer_row_pages(session: Session, after_sequence: int, page_size: int) -> Iterator[list[tuple[Any, ...]]]:
    """Raw rows (sequence, id, debit_account, ..., prev_hash, hash) after a sequence, in chain order, in pages.

    One query streamed through the driver's own cursor, so no per-row objects are built; on
    PostgreSQL a server-side cursor keeps memory bounded. For audits over millions of rows.
    """
    assert type(after_sequence) is int and page_size > 0
    query = (f"SELECT {_SCAN_COLUMNS} FROM {_TRANSFERS.name} WHERE sequence > {after_sequence}"
             " ORDER BY sequence")
    driver_connection = session.connection().connection.driver_connection
    if _psycopg(session):
        # Binary rows: the integers arrive as int8, not text to parse.
        cursor = driver_connection.cursor(name="ledger_transfer_scan", binary=True)
    elif session.get_bind().dialect.name == "postgresql":
        cursor = driver_connection.cursor(name="ledger_transfer_scan")
    else:
        cursor = driver_connection.cursor()
    try:
        cursor.execute(query)
        pages = iter(lambda: cursor.fetchmany(page_size), [])
        yield from _read_ahead(pages) if _psycopg(session) else pages
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

