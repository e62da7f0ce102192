"""Anchoring closed epochs' roots on the payout chain, and checking them there.

The chain is injected (ledger.anchor.PayoutChain, or a fake in tests) through the
PayoutChainLike protocol, so this module imports no web3. Publishing is outside the
database transaction: a root already on chain is recognised and only recorded, so a
crash between publishing and committing never publishes twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.orm import Session

from ledger.storage import epoch_store
from ledger.storage.epoch_store import AnchorRecord
from ledger.errors import LedgerError

ANCHORS_PER_CALL_MAX = 100


class PayoutChainLike(Protocol):
    chain_id: int
    distributor_address: str

    def epoch_root(self, epoch: int) -> bytes | None: ...

    def publish(self, epoch: int, root: bytes, total: int) -> ChainReceiptLike: ...


class ChainReceiptLike(Protocol):
    tx_hash: str
    block_number: int
    gas_used: int


class AnchorMismatchError(LedgerError):
    """The chain holds a different root for an epoch than the ledger: never overwrite, investigate."""


@dataclass(frozen=True)
class AnchorProblem:
    epoch: int
    reason: str


def anchor_epochs(session: Session, chain: PayoutChainLike, *, limit: int = ANCHORS_PER_CALL_MAX,
                  now_us: int | None = None) -> list[AnchorRecord]:
    """Publish every closed epoch with payouts that this distributor lacks, oldest first; caller commits."""
    assert 0 < limit <= ANCHORS_PER_CALL_MAX
    done = epoch_store.anchors(session, chain.chain_id, chain.distributor_address)
    anchored: list[AnchorRecord] = []
    for epoch in epoch_store.all_epochs(session):
        if epoch.root is None or epoch.number in done:
            continue
        if len(anchored) == limit:
            break
        root = bytes.fromhex(epoch.root[2:])
        onchain = chain.epoch_root(epoch.number)
        if onchain is not None and onchain != root:
            raise AnchorMismatchError(
                f"epoch {epoch.number}: the chain holds root 0x{onchain.hex()} but the ledger closed it with "
                f"{epoch.root}; run `mlxnet ledger audit`")
        if onchain is None:
            receipt = chain.publish(epoch.number, root, epoch.total)
            tx_hash, block_number, gas_used = receipt.tx_hash, receipt.block_number, receipt.gas_used
        else:
            tx_hash, block_number, gas_used = "0x" + "0" * 64, 0, 0  # published before a crash
        record = AnchorRecord(epoch.number, chain.chain_id, chain.distributor_address, epoch.root, tx_hash,
                              block_number, gas_used, now_us or time.time_ns() // 1_000)
        epoch_store.insert_anchor(session, record)
        anchored.append(record)
    return anchored


def check_anchors(session: Session, chain: PayoutChainLike) -> list[AnchorProblem]:
    """Every closed epoch with payouts must have exactly its root on chain."""
    problems: list[AnchorProblem] = []
    for epoch in epoch_store.all_epochs(session):
        if epoch.root is None:
            continue
        onchain = chain.epoch_root(epoch.number)
        if onchain is None:
            problems.append(AnchorProblem(epoch.number, "the root is not on chain yet"))
        elif "0x" + onchain.hex() != epoch.root:
            problems.append(AnchorProblem(
                epoch.number, f"the chain holds 0x{onchain.hex()}, the ledger {epoch.root}"))
    return problems
