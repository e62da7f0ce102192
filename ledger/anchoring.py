"""Anchoring closed epochs' roots and journal heads on the payout chain, and checking them there.

The chain is injected (ledger.anchor.PayoutChain, or a fake in tests) through the
PayoutChainLike protocol, so this module imports no web3. Beside each root goes the digest
of the epoch's record (ledger.head_signatures.head_digest: its journal head, root and
total), so the audit can hold the database to the chain without trusting the coordinator.
Publishing is outside the database transaction: a root already on chain is recognised and
only recorded, so a crash between publishing and committing never publishes twice.
An anchor is recorded once its block has `confirmations` blocks on it (its own included);
until then the epoch waits, on chain but unrecorded, and later passes look again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.orm import Session

from ledger.storage import epoch_store
from ledger.storage.epoch_store import AnchorRecord
from ledger.errors import LedgerError
from ledger.head_signatures import head_digest

ANCHORS_PER_CALL_MAX = 100
REORG_CHECKED_MAX = 16  # recent anchors looked up on chain each call: deeper reorgs are not expected
log = logging.getLogger(__name__)


class PayoutChainLike(Protocol):
    chain_id: int
    distributor_address: str

    def epoch_root(self, epoch: int) -> bytes | None: ...

    def epoch_head(self, epoch: int) -> bytes | None: ...

    def publish(self, epoch: int, root: bytes, total: int, head: bytes) -> ChainReceiptLike: ...

    def publication(self, epoch: int) -> ChainReceiptLike | None: ...

    def block_number(self) -> int: ...


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


@dataclass(frozen=True)
class AnchorPass:
    anchored: list[AnchorRecord]  # recorded in this pass, each `confirmations` deep
    waiting: list[int]  # epochs on chain but not deep enough yet: a later pass records them


def anchor_epochs(session: Session, chain: PayoutChainLike, *, limit: int = ANCHORS_PER_CALL_MAX,
                  now_us: int | None = None) -> list[AnchorRecord]:
    """anchor_pass with one confirmation: what it recorded."""
    return anchor_pass(session, chain, limit=limit, now_us=now_us).anchored


def anchor_pass(session: Session, chain: PayoutChainLike, *, confirmations: int = 1,
                limit: int = ANCHORS_PER_CALL_MAX, now_us: int | None = None) -> AnchorPass:
    """Publish every closed epoch with payouts that this distributor lacks, oldest first, and record
    each once `confirmations` deep; caller commits.

    The newest REORG_CHECKED_MAX anchors recorded are looked up on chain first: one whose root
    is gone (a reorg dropped its transaction) loses its record and is published again.
    """
    assert 0 < limit <= ANCHORS_PER_CALL_MAX and confirmations >= 1
    done = epoch_store.anchors(session, chain.chain_id, chain.distributor_address)
    for number in sorted(done)[-REORG_CHECKED_MAX:]:
        if chain.epoch_root(number) is None:
            log.warning("epoch %d: its anchor (tx %s) is no longer on chain: publishing it again",
                        number, done[number].tx_hash)
            epoch_store.delete_anchor(session, done.pop(number))
    anchored: list[AnchorRecord] = []
    waiting: list[int] = []
    for epoch in epoch_store.all_epochs(session):
        if epoch.root is None or epoch.number in done:
            continue
        if len(anchored) + len(waiting) == limit:
            break
        root, head = bytes.fromhex(epoch.root[2:]), head_digest(epoch)
        onchain = chain.epoch_root(epoch.number)
        if onchain is not None and (onchain, chain.epoch_head(epoch.number)) != (root, head):
            raise AnchorMismatchError(
                f"epoch {epoch.number}: the chain holds root 0x{onchain.hex()} and another head than the ledger's "
                f"record (root {epoch.root}); run `mlxnet ledger audit`")
        # Published now, or before a crash or an earlier pass (then found by its event, if the node keeps logs).
        receipt = (chain.publish(epoch.number, root, epoch.total, head) if onchain is None
                   else chain.publication(epoch.number))
        if receipt is not None and confirmations > 1 and not _deep_enough(chain, receipt, confirmations):
            waiting.append(epoch.number)
            continue
        tx_hash, block_number, gas_used = ((receipt.tx_hash, receipt.block_number, receipt.gas_used) if receipt
                                           else ("0x" + "0" * 64, 0, 0))
        record = AnchorRecord(epoch.number, chain.chain_id, chain.distributor_address, epoch.root, tx_hash,
                              block_number, gas_used, now_us or time.time_ns() // 1_000)
        epoch_store.insert_anchor(session, record)
        anchored.append(record)
    return AnchorPass(anchored, waiting)


def _deep_enough(chain: PayoutChainLike, receipt: ChainReceiptLike, confirmations: int) -> bool:
    depth = chain.block_number() - receipt.block_number + 1
    if depth < confirmations:
        log.info("epoch anchor tx %s: %d of %d confirmations", receipt.tx_hash, max(depth, 0), confirmations)
    return depth >= confirmations


def check_anchors(session: Session, chain: PayoutChainLike) -> list[AnchorProblem]:
    """Every closed epoch with payouts must have exactly its root and its record's digest on chain."""
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
        elif chain.epoch_head(epoch.number) != head_digest(epoch):
            problems.append(AnchorProblem(
                epoch.number, "the epoch's record (journal head, total) differs from the digest anchored on chain"))
    return problems
