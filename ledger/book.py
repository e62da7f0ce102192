"""The ledger's public API: accounts, transfers, pending resolution, balances and audits.

Every function takes the caller's SQLAlchemy Session and never commits, so job state and
money move in one transaction. Expected outcomes come back as ResultCode values
(TigerBeetle style); only programmer errors (assert) and database faults raise.

Transfer ids are chosen by the caller, so a retry answers `exists` (or
`exists_with_different_fields`) instead of moving money twice. create_transfer_chains
takes many linked chains per call (each all-or-nothing, the chains independent, like
TigerBeetle's linked events), which is how thousands of payments a second get through. Writers serialise on the
chain-head row until the caller commits: keep ledger work late in short transactions.
On PostgreSQL use READ COMMITTED (the default); under REPEATABLE READ or SERIALIZABLE a
concurrent writer makes the lock raise a serialization failure and the caller must retry.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from enum import StrEnum

from sqlalchemy.orm import Session

from ledger.storage import store
from ledger.audit import verify_balances, verify_chain  # re-exported: audits sit beside the API
from ledger.model import (
    BATCH_SIZE_MAX,
    ID_LENGTH_MAX,
    OPERATIONS_PER_CALL_MAX,
    Account,
    AccountKind,
    Balance,
    ChainHead,
    ExpirePending,
    Operation,
    PostPending,
    ResultCode,
    Transfer,
    TransferKind,
    TransferRequest,
    TransferResult,
    TransferState,
    VoidPending,
)
from ledger.rules import evaluate_chains, valid_id

__all__ = [
    "JobStep",
    "account",
    "balance",
    "chain_head",
    "create_transfer",
    "create_transfer_chains",
    "create_transfers",
    "ensure_account",
    "existing_transfer_ids",
    "expire_pending",
    "expired_pending_ids",
    "get_transfer",
    "get_transfers",
    "job_transfer_id",
    "pending_state",
    "post_pending",
    "transfers_for_job",
    "verify_balances",
    "verify_chain",
    "void_pending",
]

# Issuance and external accounts stand for money entering the ledger, so they run negative.
_OVERDRAFT_ALLOWED_KINDS = frozenset({AccountKind.ISSUANCE, AccountKind.EXTERNAL, AccountKind.DEBT})
EXPIRED_PENDING_LIMIT_MAX = 1_000


class JobStep(StrEnum):
    RESERVE = "reserve"
    POST = "post"
    VOID = "void"
    EXPIRE = "expire"
    CREDIT = "credit"
    FEE = "fee"
    RELEASE = "release"  # posts the operator's pending credit
    REJECT = "reject"  # voids the operator's pending credit
    REFUND = "refund"  # escrow -> consumer after a failed check
    FEE_REFUND = "fee_refund"  # treasury -> consumer after a failed check


def job_transfer_id(job_id: str, step: JobStep) -> str:
    """The transfer id of one step of a job's payment: the same job and step always give the same id."""
    assert isinstance(step, JobStep)
    assert valid_id(job_id), f"job ids are short printable text without spaces: {job_id!r}"
    transfer_id = f"{job_id}:{step}"
    assert len(transfer_id) <= ID_LENGTH_MAX, f"job id too long for a transfer id: {job_id!r}"
    return transfer_id


def _now_us(now_us: int | None) -> int:
    if now_us is None:
        return time.time_ns() // 1_000
    assert type(now_us) is int and now_us > 0, "now_us is a positive int of microseconds"
    return now_us


def refuses_overdraft_by_default(kind: AccountKind) -> bool:
    return kind not in _OVERDRAFT_ALLOWED_KINDS


def ensure_account(
    session: Session,
    account_id: str,
    kind: AccountKind,
    *,
    debits_must_not_exceed_credits: bool | None = None,
    now_us: int | None = None,
) -> ResultCode:
    """Create the account if missing: `created`, `exists`, or `exists_with_different_fields`.

    By default every account except issuance and external ones refuses overdraft.
    """
    assert isinstance(kind, AccountKind)
    if not valid_id(account_id):
        return ResultCode.INVALID_ID
    if debits_must_not_exceed_credits is None:
        debits_must_not_exceed_credits = refuses_overdraft_by_default(kind)
    # The ledger's write lock comes first, even when the account exists: callers rely on it
    # preceding their own row locks (PostgreSQL finds a deadlock when the order varies).
    existing = store.lock_and_read_accounts(session, [account_id]).get(account_id)
    if existing is not None:
        same = existing.kind is kind and existing.debits_must_not_exceed_credits == debits_must_not_exceed_credits
        return ResultCode.EXISTS if same else ResultCode.EXISTS_WITH_DIFFERENT_FIELDS
    store.insert_account(session, account_id, kind, debits_must_not_exceed_credits, _now_us(now_us))
    return ResultCode.CREATED


_OPERATION_TYPES = (TransferRequest, PostPending, VoidPending, ExpirePending)  # a tuple: isinstance's fast path


def create_transfer_chains(
    session: Session, chains: Iterable[Iterable[Operation]], *, now_us: int | None = None
) -> tuple[tuple[TransferResult, ...], ...]:
    """Apply many linked chains in one call: each chain all-or-nothing, the chains independent.

    A chain that fails writes nothing: its failing operation keeps its code and the rest
    of it answer `linked_event_failed`, while the chains before and after it still apply.
    The results, rows and hashes are those of calling create_transfers once per chain, in
    order, at the same time; but it takes the lock, reads the rows and writes them once.
    At most BATCH_SIZE_MAX operations per chain, OPERATIONS_PER_CALL_MAX in all.
    """
    batch = tuple(tuple(chain) for chain in chains)
    assert batch, "at least one chain"
    lengths = list(map(len, batch))  # min and max over a list: no generator step per chain
    assert min(lengths) >= 1 and max(lengths) <= BATCH_SIZE_MAX, f"a chain holds 1..{BATCH_SIZE_MAX} operations"
    operations = [operation for chain in batch for operation in chain]
    assert len(operations) <= OPERATIONS_PER_CALL_MAX, f"a call holds at most {OPERATIONS_PER_CALL_MAX} operations"
    for operation in operations:
        assert isinstance(operation, _OPERATION_TYPES)
        assert isinstance(operation.id, str), "transfer ids are text"
        assert isinstance(getattr(operation, "pending_id", ""), str), "pending ids are text"
    snapshot = store.lock_and_load_snapshot(session, operations)
    with store.transfer_writer(session) as settled:  # rows go out while later chains are evaluated
        evaluation = evaluate_chains(batch, snapshot, _now_us(now_us), settled)
    store.write(session, evaluation)
    return evaluation.chain_results


def lock_ledger(session: Session) -> None:
    """Take the ledger's write lock now (every write takes it first; it is held to the commit).

    For a caller that must order it before its own row locks (see coordinator.service)."""
    store.lock_chain_head(session)


def accounts_exist(session: Session, accounts: Iterable[tuple[str, AccountKind]]) -> bool:
    """Whether each (id, kind) exists as ensure_account would create it, in one read.

    Takes the ledger's write lock first, as ensure_account does: callers rely on it
    coming before any other ledger lock (PostgreSQL would find a deadlock otherwise).
    """
    wanted = list(accounts)
    existing = store.lock_and_read_accounts(session, [account_id for account_id, _ in wanted])
    return all(account_id in existing and existing[account_id].kind is kind
               and existing[account_id].debits_must_not_exceed_credits == refuses_overdraft_by_default(kind)
               for account_id, kind in wanted)


def create_transfers(
    session: Session, operations: Iterable[Operation], *, now_us: int | None = None
) -> tuple[TransferResult, ...]:
    """Apply up to BATCH_SIZE_MAX operations atomically: all succeed, or nothing is written.

    When one fails it keeps its own code and the others answer `linked_event_failed`.
    """
    return create_transfer_chains(session, [operations], now_us=now_us)[0]


def create_transfer(session: Session, request: TransferRequest, *, now_us: int | None = None) -> TransferResult:
    return create_transfers(session, [request], now_us=now_us)[0]


def post_pending(
    session: Session,
    id: str,
    pending_id: str,
    amount: int | None = None,
    *,
    kind: TransferKind | None = None,
    policy_version: str | None = None,
    now_us: int | None = None,
) -> TransferResult:
    """Post `amount` (default: all) of a pending transfer; the rest goes back to the debit account."""
    operation = PostPending(id=id, pending_id=pending_id, amount=amount, kind=kind, policy_version=policy_version)
    return create_transfers(session, [operation], now_us=now_us)[0]


def void_pending(
    session: Session, id: str, pending_id: str, *, kind: TransferKind | None = None, now_us: int | None = None
) -> TransferResult:
    operation = VoidPending(id=id, pending_id=pending_id, kind=kind)
    return create_transfers(session, [operation], now_us=now_us)[0]


def expire_pending(
    session: Session, id: str, pending_id: str, *, kind: TransferKind | None = None, now_us: int | None = None
) -> TransferResult:
    """Release a pending transfer whose timeout has passed (`pending_transfer_not_expired` before)."""
    operation = ExpirePending(id=id, pending_id=pending_id, kind=kind)
    return create_transfers(session, [operation], now_us=now_us)[0]


def account(session: Session, account_id: str) -> Account | None:
    return store.read_account(session, account_id)


def balance(session: Session, account_id: str) -> Balance | None:
    """The account's four balance fields, or None when the account does not exist."""
    found = store.read_account(session, account_id)
    return None if found is None else found.balance


def get_transfer(session: Session, transfer_id: str) -> Transfer | None:
    return store.read_transfer(session, transfer_id)


def get_transfers(session: Session, transfer_ids: Iterable[str]) -> dict[str, Transfer]:
    """The stored transfers among these ids, by id (missing ids are left out)."""
    return store.read_transfers(session, transfer_ids)


def existing_transfer_ids(session: Session, transfer_ids: Iterable[str]) -> set[str]:
    """The ids among these that name a stored transfer: a cheaper question than get_transfers."""
    return store.existing_transfer_ids(session, transfer_ids)


def pending_state(session: Session, pending_id: str) -> TransferState | None:
    """`pending` until resolved, then the resolution's state; None if no such pending transfer."""
    pending = store.read_transfer(session, pending_id)
    if pending is None or pending.state is not TransferState.PENDING:
        return None
    resolution = store.read_resolution(session, pending_id)
    return TransferState.PENDING if resolution is None else resolution.state


def transfers_for_job(session: Session, job_id: str) -> tuple[Transfer, ...]:
    """Every transfer tagged with the job, in chain order: the job's whole payment story."""
    return tuple(store.transfers_for_job(session, job_id))


def expired_pending_ids(session: Session, now_us: int, limit: int = 100) -> tuple[str, ...]:
    """Unresolved pending transfers whose timeout has passed, oldest first, for a sweeper."""
    assert 0 < limit <= EXPIRED_PENDING_LIMIT_MAX
    return tuple(store.expired_pending_ids(session, _now_us(now_us), limit))


def chain_head(session: Session) -> ChainHead:
    """The latest link of the hash chain: publish or anchor it to make the history tamper-evident."""
    return store.read_chain_head(session)

