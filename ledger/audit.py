"""Audits anyone can rerun: the hash chain is unbroken, and balances equal the replayed transfers.

Both read in pages. On PostgreSQL run them in a REPEATABLE READ transaction for one
consistent snapshot; under READ COMMITTED they tolerate writers appending meanwhile.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from ledger.storage import store
from ledger.chain import GENESIS_HASH, transfer_hash
from ledger.model import Balance, BalanceCheck, ChainCheck, ChainHead, Transfer, TransferState
from ledger.rules import balance_changes

AUDIT_BATCH_SIZE = 1_000


def _link_problem(transfer: Transfer, expected_sequence: int, prev_hash: str) -> str | None:
    if transfer.sequence != expected_sequence:
        return f"expected sequence {expected_sequence}, found {transfer.sequence}: a transfer is missing"
    if transfer.prev_hash != prev_hash:
        return "prev_hash does not match the previous transfer's hash"
    if transfer_hash(transfer) != transfer.hash:
        return "hash does not match the transfer's fields: the row was edited"
    return None


def _head_problem(transfer: Transfer, head: ChainHead) -> str | None:
    if transfer.hash != head.last_hash or transfer.id != head.last_transfer_id:
        return "the chain head does not match the transfer at its sequence"
    return None


def verify_chain(session: Session, *, batch_size: int = AUDIT_BATCH_SIZE) -> ChainCheck:
    """Walk the chain from the first transfer; report the first transfer where it breaks.

    A deleted transfer shows up at its successor (a sequence gap) or, at the tail, as the
    head naming a transfer that is gone.
    """
    head = store.read_chain_head(session)
    expected_sequence, prev_hash, checked = 1, GENESIS_HASH, 0
    last: Transfer | None = None
    for transfer in store.scan_transfers(session, batch_size):
        problem = _link_problem(transfer, expected_sequence, prev_hash)
        if problem is None and transfer.sequence == head.last_sequence:
            problem = _head_problem(transfer, head)
        if problem is not None:
            return ChainCheck(False, transfer.id, checked, problem)
        checked += 1
        expected_sequence, prev_hash, last = transfer.sequence + 1, transfer.hash, transfer
    last_sequence = 0 if last is None else last.sequence
    if last_sequence < head.last_sequence:
        reason = f"the chain head is at sequence {head.last_sequence} but the transfers stop at {last_sequence}"
        return ChainCheck(False, head.last_transfer_id, checked, reason)
    if last is not None and last_sequence > head.last_sequence:
        # Transfers past the head we read are fine only if a writer committed them since.
        if last_sequence > store.read_chain_head(session).last_sequence:
            return ChainCheck(False, last.id, checked, "transfers exist beyond the chain head")
    return ChainCheck(True, None, checked)


def replayed_balances(session: Session, *, batch_size: int = AUDIT_BATCH_SIZE) -> dict[str, Balance]:
    """Every account's balance recomputed from the transfers alone, in chain order."""
    balances: dict[str, Balance] = {}
    open_pending: dict[str, Transfer] = {}
    for transfer in store.scan_transfers(session, batch_size):
        pending = None
        if transfer.pending_id is not None:
            pending = open_pending.pop(transfer.pending_id, None)
            if pending is None:
                continue  # a tampered ledger; skipping it makes the stored balances disagree
        elif transfer.state is TransferState.PENDING:
            open_pending[transfer.id] = transfer
        debit_change, credit_change = balance_changes(transfer, pending)
        for account_id, change in ((transfer.debit_account, debit_change), (transfer.credit_account, credit_change)):
            balances[account_id] = balances.get(account_id, Balance()).plus(change)
    return balances


def verify_balances(session: Session, *, batch_size: int = AUDIT_BATCH_SIZE) -> BalanceCheck:
    """Compare each stored balance with the replay of the transfers; list the accounts that differ."""
    replayed = replayed_balances(session, batch_size=batch_size)
    mismatched = [
        account.id
        for account in store.scan_accounts(session, batch_size)
        if replayed.pop(account.id, Balance()) != account.balance
    ]
    mismatched.extend(replayed)  # transfers naming accounts that do not exist
    return BalanceCheck(not mismatched, tuple(sorted(mismatched)))
