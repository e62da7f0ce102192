"""The SQL shell for epochs, payouts, seat results, payout addresses and anchors.

Like ledger.storage.store, it works through the caller's Session, never commits, and returns
frozen records only. Writers hold the chain-head lock (ledger.storage.store.lock_chain_head).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, insert, literal, select, update
from sqlalchemy.orm import Session

from ledger.storage import tables
from ledger.model import AccountKind, Transfer, TransferKind, TransferState
from ledger.seats import SeatOutcome
from ledger.storage.among import among, json_ids
from ledger.storage.store import _transfer_from_row

OPERATOR_ACCOUNT_PREFIX = "operator:"  # ledger.jobs.operator_account_id


@dataclass(frozen=True)
class EpochRecord:
    number: int
    length_s: int
    cutoff_us: int  # the epoch holds transfers created in (previous cutoff, cutoff_us]
    policy_version: str
    root: str | None  # 0x-hex, None when nobody was paid
    total: int
    leaf_count: int
    last_sequence: int
    last_hash: str

    @property
    def start_us(self) -> int:
        """The nominal start of the epoch (epochs are aligned to the Unix epoch)."""
        return self.number * self.length_s * 1_000_000

    @property
    def end_us(self) -> int:
        return (self.number + 1) * self.length_s * 1_000_000


@dataclass(frozen=True)
class PayoutRecord:
    epoch: int
    operator_id: str
    address: str
    amount: int
    transfer_id: str


@dataclass(frozen=True)
class AnchorRecord:
    epoch: int
    chain_id: int
    distributor: str
    root: str
    tx_hash: str
    block_number: int
    gas_used: int
    anchored_at_us: int


@dataclass(frozen=True)
class SignedHead:
    """The coordinator's signature over an epoch's record (ledger.head_signatures)."""

    epoch: int
    public_key: str  # hex of the 32-byte Ed25519 public key
    signature: str  # hex of the 64-byte signature over head_message(epoch record)
    signed_at_us: int


def _epoch(row) -> EpochRecord:  # type: ignore[no-untyped-def]
    return EpochRecord(row.number, row.length_s, row.cutoff_us, row.policy_version, row.root, row.total,
                       row.leaf_count, row.last_sequence, row.last_hash)


def read_epoch(session: Session, number: int) -> EpochRecord | None:
    row = session.execute(select(tables.epochs).where(tables.epochs.c.number == number)).one_or_none()
    return None if row is None else _epoch(row)


def last_epoch(session: Session) -> EpochRecord | None:
    query = select(tables.epochs).order_by(tables.epochs.c.number.desc()).limit(1)
    row = session.execute(query).one_or_none()
    return None if row is None else _epoch(row)


def previous_epoch(session: Session, number: int) -> EpochRecord | None:
    query = (select(tables.epochs).where(tables.epochs.c.number < number)
             .order_by(tables.epochs.c.number.desc()).limit(1))
    row = session.execute(query).one_or_none()
    return None if row is None else _epoch(row)


def all_epochs(session: Session) -> list[EpochRecord]:
    return [_epoch(row) for row in session.execute(select(tables.epochs).order_by(tables.epochs.c.number))]


def insert_epoch(session: Session, epoch: EpochRecord, payouts: Sequence[PayoutRecord],
                 seats: Sequence[SeatOutcome]) -> None:
    session.execute(insert(tables.epochs).values(
        number=epoch.number, length_s=epoch.length_s, cutoff_us=epoch.cutoff_us,
        policy_version=epoch.policy_version, root=epoch.root, total=epoch.total,
        leaf_count=epoch.leaf_count, last_sequence=epoch.last_sequence, last_hash=epoch.last_hash))
    if payouts:
        session.execute(insert(tables.epoch_payouts), [
            dict(epoch=p.epoch, operator_id=p.operator_id, address=p.address, amount=p.amount,
                 transfer_id=p.transfer_id) for p in payouts])
    if seats:
        session.execute(insert(tables.seat_epochs), [
            dict(epoch=epoch.number, node_id=s.node_id, operator_id=s.operator_id,
                 availability_bps=s.availability_bps, qualified=s.qualified, reason=s.reason,
                 availability_reward=s.availability_reward, job_bonus=s.job_bonus,
                 bonus_job_count=s.bonus_job_count) for s in seats])


def payouts(session: Session, epoch: int) -> list[PayoutRecord]:
    query = (select(tables.epoch_payouts).where(tables.epoch_payouts.c.epoch == epoch)
             .order_by(tables.epoch_payouts.c.operator_id))
    return [PayoutRecord(r.epoch, r.operator_id, r.address, r.amount, r.transfer_id)
            for r in session.execute(query)]


def seat_outcomes(session: Session, epoch: int, operator_id: str | None = None) -> list[SeatOutcome]:
    query = select(tables.seat_epochs).where(tables.seat_epochs.c.epoch == epoch)
    if operator_id is not None:
        query = query.where(tables.seat_epochs.c.operator_id == operator_id)
    return [SeatOutcome(r.node_id, r.operator_id, r.availability_bps, bool(r.qualified), r.reason,
                        r.availability_reward, r.job_bonus, r.bonus_job_count)
            for r in session.execute(query.order_by(tables.seat_epochs.c.node_id))]


def payout_address(session: Session, operator_id: str) -> str | None:
    query = select(tables.payout_addresses.c.address).where(tables.payout_addresses.c.operator_id == operator_id)
    return session.execute(query).scalar_one_or_none()


def set_payout_address(session: Session, operator_id: str, address: str, now_us: int) -> None:
    table = tables.payout_addresses
    updated = session.execute(update(table).where(table.c.operator_id == operator_id)
                              .values(address=address, updated_at_us=now_us))
    if updated.rowcount == 0:
        session.execute(insert(table).values(operator_id=operator_id, address=address, updated_at_us=now_us))


def payable_operators(session: Session, limit: int) -> list[tuple[str, str, int]]:
    """(operator account id, payout address, available) for operators with a balance and an address."""
    accounts, addresses = tables.accounts, tables.payout_addresses
    available = accounts.c.credits_posted - accounts.c.debits_posted - accounts.c.debits_pending
    query = (select(accounts.c.id, addresses.c.address, available.label("available"))
             .join(addresses, accounts.c.id == literal(OPERATOR_ACCOUNT_PREFIX).concat(addresses.c.operator_id))
             .where(accounts.c.kind == str(AccountKind.OPERATOR), available > 0)
             .order_by(accounts.c.id).limit(limit))
    return [(row.id, row.address, int(row.available)) for row in session.execute(query)]


def posted_job_credits(session: Session, job_ids: Iterable[str], credit_account: str,
                       after_us: int, until_us: int) -> list[Transfer]:
    """Posted operator credits of these jobs to the account, created in (after_us, until_us]."""
    transfers = tables.transfers
    query = (select(transfers)
             .where(among(transfers.c.job_id),
                    transfers.c.kind == str(TransferKind.JOB_OPERATOR_CREDIT),
                    transfers.c.state == str(TransferState.POSTED),
                    transfers.c.credit_account == credit_account,
                    transfers.c.created_at_us > after_us, transfers.c.created_at_us <= until_us)
             .order_by(transfers.c.sequence))
    return [_transfer_from_row(row) for row in session.execute(query, {"among": json_ids(job_ids)})]


def transfers_in_window(session: Session, account_id: str, after_us: int, until_us: int,
                        limit: int) -> list[Transfer]:
    """Transfers touching the account created in (after_us, until_us], in chain order."""
    transfers = tables.transfers
    query = (select(transfers)
             .where((transfers.c.debit_account == account_id) | (transfers.c.credit_account == account_id),
                    transfers.c.created_at_us > after_us, transfers.c.created_at_us <= until_us)
             .order_by(transfers.c.sequence).limit(limit))
    return [_transfer_from_row(row) for row in session.execute(query)]


def insert_anchor(session: Session, anchor: AnchorRecord) -> None:
    session.execute(insert(tables.epoch_anchors).values(
        epoch=anchor.epoch, chain_id=anchor.chain_id, distributor=anchor.distributor, root=anchor.root,
        tx_hash=anchor.tx_hash, block_number=anchor.block_number, gas_used=anchor.gas_used,
        anchored_at_us=anchor.anchored_at_us))


def delete_anchor(session: Session, anchor: AnchorRecord) -> None:
    """Forget an anchor the chain no longer holds (a reorg dropped it), so it is published again."""
    table = tables.epoch_anchors
    session.execute(delete(table).where(table.c.epoch == anchor.epoch, table.c.chain_id == anchor.chain_id,
                                        table.c.distributor == anchor.distributor))


def anchors(session: Session, chain_id: int, distributor: str) -> dict[int, AnchorRecord]:
    table = tables.epoch_anchors
    query = select(table).where(table.c.chain_id == chain_id, table.c.distributor == distributor)
    return {row.epoch: _anchor(row) for row in session.execute(query)}


def _anchor(row) -> AnchorRecord:  # type: ignore[no-untyped-def]
    return AnchorRecord(row.epoch, row.chain_id, row.distributor, row.root, row.tx_hash, row.block_number,
                        row.gas_used, row.anchored_at_us)


def anchors_of_epoch(session: Session, epoch: int, limit: int) -> list[AnchorRecord]:
    """Where the epoch's root was published, newest first, as recorded when it was published."""
    table = tables.epoch_anchors
    query = select(table).where(table.c.epoch == epoch).order_by(table.c.anchored_at_us.desc()).limit(limit)
    return [_anchor(row) for row in session.execute(query)]


def epochs_progress(session: Session) -> tuple[int, int]:
    """(the newest closed epoch or -1, how many roots were anchored): moves when an epoch closes or anchors."""
    last = session.execute(select(func.max(tables.epochs.c.number))).scalar()
    anchored = session.execute(select(func.count()).select_from(tables.epoch_anchors)).scalar_one()
    return (-1 if last is None else int(last), int(anchored))


def insert_head_signature(session: Session, signed: SignedHead) -> None:
    session.execute(insert(tables.head_signatures).values(
        epoch=signed.epoch, public_key=signed.public_key, signature=signed.signature,
        signed_at_us=signed.signed_at_us))


def head_signatures(session: Session) -> dict[int, SignedHead]:
    """Every epoch's signed head, by epoch number."""
    return {row.epoch: SignedHead(row.epoch, row.public_key, row.signature, row.signed_at_us)
            for row in session.execute(select(tables.head_signatures))}
