"""Epoch close: Ultra-seat rewards from the bonus pool, then every operator's earnings into a payout tree.

Epochs are numbered from the Unix epoch (number = time // length_s, hourly by default).
Closing epoch N, at cutoff = now (after N's nominal end), in one transaction:
1. each dedicated Ultra seat that met the availability threshold is paid its availability
   reward and its job bonus from the bonus pool (pool:bonus), topped up from issuance;
2. each operator with a payout address and a positive available balance is swept,
   operator -> payouts:onchain, and gets a leaf (N, address, amount) in the Merkle tree;
3. the epoch row records the root, the total and the journal's head, and, given the
   coordinator's key, its signature over that record (ledger.head_signatures).
From then on, a transfer dated at or before the cutoff answers `epoch_closed`.
Transfer ids derive from (epoch, step, subject), so a retried close never pays twice.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.orm import Session

from ledger.storage import epoch_store, store
from ledger.book import create_transfers, ensure_account
from ledger.storage.epoch_store import EpochRecord, PayoutRecord
from ledger.errors import LedgerError
from ledger.head_signatures import HeadSigner, sign_head
from ledger.jobs import ISSUANCE_REWARDS_ACCOUNT, ensure_system_accounts, operator_account_id
from ledger.merkle import LEAVES_MAX, PayoutLeaf, PayoutTree, build_tree, normalize_address, valid_address
from ledger.model import BATCH_SIZE_MAX, AccountKind, Operation, ResultCode, TransferKind, TransferRequest
from ledger.policy import DEFAULT_POLICY, EarningPolicy
from ledger.rules import valid_id
from ledger.seats import SeatInput, SeatOutcome, seat_outcome

EPOCH_LENGTH_S_DEFAULT = 3_600
EPOCH_LENGTH_S_MAX = 7 * 24 * 3_600
SEATS_PER_EPOCH_MAX = 100_000
BONUS_POOL_ACCOUNT = "pool:bonus"
ONCHAIN_PAYOUTS_ACCOUNT = "payouts:onchain"


class EpochCode(StrEnum):
    CREATED = "created"
    EXISTS = "exists"
    EPOCH_NOT_OVER = "epoch_not_over"  # its nominal end is still in the future
    EPOCH_OUT_OF_ORDER = "epoch_out_of_order"  # a later epoch is already closed
    EPOCH_CLOSED = "epoch_closed"  # the clock is at or before the last cutoff
    INVALID_SEAT = "invalid_seat"  # a seat names a malformed or repeated node/operator id


@dataclass(frozen=True)
class EpochClose:
    code: EpochCode
    epoch: EpochRecord | None = None

    @property
    def ok(self) -> bool:
        return self.code in (EpochCode.CREATED, EpochCode.EXISTS)


def epoch_number(time_us: int, length_s: int = EPOCH_LENGTH_S_DEFAULT) -> int:
    return time_us // (length_s * 1_000_000)


def due_epoch(now_us: int, length_s: int = EPOCH_LENGTH_S_DEFAULT) -> int:
    """The latest epoch whose nominal end has passed."""
    return epoch_number(now_us, length_s) - 1


def set_payout_address(session: Session, operator_id: str, address: str, *, now_us: int | None = None) -> ResultCode:
    """Where the operator's epoch payouts go on chain; `invalid_field` for a malformed address."""
    if not valid_id(operator_id) or not valid_address(address):
        return ResultCode.INVALID_FIELD
    store.lock_chain_head(session)
    epoch_store.set_payout_address(session, operator_id, normalize_address(address), now_us or _now_us())
    return ResultCode.CREATED


def _now_us() -> int:
    return time.time_ns() // 1_000


def _check_seats(seats: Sequence[SeatInput]) -> bool:
    nodes = [seat.node_id for seat in seats]
    return (len(seats) <= SEATS_PER_EPOCH_MAX and len(set(nodes)) == len(nodes)
            and all(valid_id(s.node_id) and valid_id(s.operator_id) for s in seats))


def close_epoch(
    session: Session,
    number: int,
    seats: Sequence[SeatInput] = (),
    *,
    length_s: int = EPOCH_LENGTH_S_DEFAULT,
    policy: EarningPolicy = DEFAULT_POLICY,
    now_us: int | None = None,
    signer: HeadSigner | None = None,
) -> EpochClose:
    """Close epoch `number` (see the module docstring); the caller commits.

    With a signer (the coordinator's key), its signature over the epoch's record is kept
    beside it, in the same transaction, so no closed epoch is left unsigned by a crash.
    """
    assert type(number) is int and number >= 0 and 0 < length_s <= EPOCH_LENGTH_S_MAX
    if not _check_seats(seats):
        return EpochClose(EpochCode.INVALID_SEAT)
    ensure_system_accounts(session)
    for account_id, kind in ((BONUS_POOL_ACCOUNT, AccountKind.POOL), (ONCHAIN_PAYOUTS_ACCOUNT, AccountKind.PAYOUT)):
        assert ensure_account(session, account_id, kind) in (ResultCode.CREATED, ResultCode.EXISTS)
    store.lock_chain_head(session)
    now = now_us if now_us is not None else _now_us()  # read under the lock, like every writer's clock
    existing = epoch_store.read_epoch(session, number)
    if existing is not None:
        return EpochClose(EpochCode.EXISTS, existing)
    last = epoch_store.last_epoch(session)
    if last is not None and last.number > number:
        return EpochClose(EpochCode.EPOCH_OUT_OF_ORDER, last)
    if now < (number + 1) * length_s * 1_000_000:
        return EpochClose(EpochCode.EPOCH_NOT_OVER)
    after_us = 0 if last is None else last.cutoff_us
    if now <= after_us:
        return EpochClose(EpochCode.EPOCH_CLOSED, last)
    outcomes = _pay_seats(session, number, seats, after_us, now, length_s, policy)
    payouts, tree = _sweep_operators(session, number, now)
    head = store.read_chain_head(session)
    epoch = EpochRecord(
        number=number, length_s=length_s, cutoff_us=now, policy_version=policy.version,
        root=None if tree is None else "0x" + tree.root.hex(), total=sum(p.amount for p in payouts),
        leaf_count=0 if tree is None else len(tree.leaves), last_sequence=head.last_sequence,
        last_hash=head.last_hash)
    epoch_store.insert_epoch(session, epoch, payouts, outcomes)
    if signer is not None:
        epoch_store.insert_head_signature(session, sign_head(epoch, signer, now))
    return EpochClose(EpochCode.CREATED, epoch)


def _apply(session: Session, operations: Sequence[Operation], now_us: int) -> None:
    for start in range(0, len(operations), BATCH_SIZE_MAX):
        results = create_transfers(session, operations[start:start + BATCH_SIZE_MAX], now_us=now_us)
        failed = [r for r in results if r.code not in (ResultCode.CREATED, ResultCode.EXISTS)]
        if failed:
            # Amounts were computed under the lock, so this is a bug; the caller rolls back.
            raise LedgerError(f"epoch close refused by the ledger: {failed[0].id}: {failed[0].code}")


def _pay_seats(session: Session, number: int, seats: Sequence[SeatInput], after_us: int, now_us: int,
               length_s: int, policy: EarningPolicy) -> list[SeatOutcome]:
    outcomes: list[SeatOutcome] = []
    for seat in seats:
        credits = epoch_store.posted_job_credits(
            session, seat.job_ids, operator_account_id(seat.operator_id), after_us, now_us)  # type: ignore[arg-type]
        outcomes.append(seat_outcome(seat, [credit.amount for credit in credits], length_s, policy))
    needed = sum(o.availability_reward + o.job_bonus for o in outcomes)
    if needed == 0:
        return outcomes
    pool = store.read_account(session, BONUS_POOL_ACCOUNT)
    assert pool is not None
    operations: list[Operation] = []
    shortfall = needed - max(0, pool.balance.available)
    if shortfall > 0:
        operations.append(TransferRequest(
            id=f"epoch:{number}:bonus_funding", debit_account=ISSUANCE_REWARDS_ACCOUNT,
            credit_account=BONUS_POOL_ACCOUNT, amount=shortfall, kind=TransferKind.BONUS_FUNDING,
            policy_version=policy.version))
    for outcome in outcomes:
        account_id = operator_account_id(outcome.operator_id)  # type: ignore[arg-type]
        ensure_account(session, account_id, AccountKind.OPERATOR)
        for step, amount, kind in (("seat_reward", outcome.availability_reward, TransferKind.SEAT_REWARD),
                                   ("seat_bonus", outcome.job_bonus, TransferKind.SEAT_JOB_BONUS)):
            if amount > 0:
                operations.append(TransferRequest(
                    id=f"epoch:{number}:{step}:{outcome.node_id}", debit_account=BONUS_POOL_ACCOUNT,
                    credit_account=account_id, amount=amount, kind=kind, policy_version=policy.version))
    _apply(session, operations, now_us)
    return outcomes


def _sweep_operators(session: Session, number: int, now_us: int) -> tuple[list[PayoutRecord], PayoutTree | None]:
    payable = epoch_store.payable_operators(session, LEAVES_MAX + 1)
    assert len(payable) <= LEAVES_MAX, "more operators to pay than one tree holds"
    payouts: list[PayoutRecord] = []
    operations: list[Operation] = []
    for account_id, address, amount in payable:
        operator_id = account_id.removeprefix(epoch_store.OPERATOR_ACCOUNT_PREFIX)
        transfer_id = f"epoch:{number}:payout:{operator_id}"
        payouts.append(PayoutRecord(number, operator_id, address, amount, transfer_id))
        operations.append(TransferRequest(
            id=transfer_id, debit_account=account_id, credit_account=ONCHAIN_PAYOUTS_ACCOUNT, amount=amount,
            kind=TransferKind.EPOCH_PAYOUT))
    if not payouts:
        return payouts, None
    _apply(session, operations, now_us)
    return payouts, build_tree(payout_leaves(number, payouts))


def payout_leaves(number: int, payouts: Sequence[PayoutRecord]) -> list[PayoutLeaf]:
    """One leaf per address: operators sharing an address are paid together."""
    by_address: dict[str, int] = {}
    for payout in payouts:
        by_address[payout.address] = by_address.get(payout.address, 0) + payout.amount
    return [PayoutLeaf(number, address, amount) for address, amount in sorted(by_address.items())]


def epoch_tree(session: Session, number: int) -> PayoutTree | None:
    """Rebuild an epoch's tree from its payout rows (None for an epoch that paid nobody)."""
    recorded = epoch_store.payouts(session, number)
    return build_tree(payout_leaves(number, recorded)) if recorded else None
