"""Anchoring waits for its confirmations: a root on chain but not deep enough is not recorded, never
sent twice, and recorded with its own transaction once the chain has grown (a fake chain)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sqlalchemy.orm import Session

from ledger.anchoring import anchor_pass
from ledger.storage import epoch_store
from tests.ledger.test_payout_chain import EPOCH, closed_epoch


@dataclass(frozen=True)
class Receipt:
    tx_hash: str
    block_number: int
    gas_used: int


class GrowingChain:
    """Each publish is mined in a new block; mine() adds empty blocks."""

    chain_id = 5
    distributor_address = "0x" + "d" * 40

    def __init__(self) -> None:
        self.block = 10
        self.roots: dict[int, tuple[bytes, bytes]] = {}
        self.receipts: dict[int, Receipt] = {}
        self.sent: list[int] = []

    def epoch_root(self, epoch: int) -> bytes | None:
        return self.roots[epoch][0] if epoch in self.roots else None

    def epoch_head(self, epoch: int) -> bytes | None:
        return self.roots[epoch][1] if epoch in self.roots else None

    def publish(self, epoch: int, root: bytes, total: int, head: bytes) -> Receipt:
        assert epoch not in self.roots, "the contract refuses a second root"
        self.block += 1
        self.sent.append(epoch)
        self.roots[epoch] = (root, head)
        self.receipts[epoch] = Receipt(f"0x{epoch:064x}", self.block, 50_000)
        return self.receipts[epoch]

    def publication(self, epoch: int) -> Receipt | None:
        return self.receipts.get(epoch)

    def block_number(self) -> int:
        return self.block

    def mine(self, blocks: int) -> None:
        self.block += blocks


@pytest.mark.parametrize("confirmations", [1, 2, 6])
def test_an_anchor_is_recorded_once_it_is_deep_enough_and_sent_once(session: Session, confirmations: int) -> None:
    chain = GrowingChain()
    closed_epoch(session, EPOCH)
    first = anchor_pass(session, chain, confirmations=confirmations)
    if confirmations == 1:  # its own block is the one confirmation
        assert [a.epoch for a in first.anchored] == [EPOCH] and first.waiting == []
        return
    assert first.anchored == [] and first.waiting == [EPOCH] and chain.sent == [EPOCH]
    chain.mine(confirmations - 2)  # one block short
    short = anchor_pass(session, chain, confirmations=confirmations)
    assert short.anchored == [] and short.waiting == [EPOCH] and chain.sent == [EPOCH]
    assert epoch_store.anchors(session, chain.chain_id, chain.distributor_address) == {}
    chain.mine(1)
    (record,) = anchor_pass(session, chain, confirmations=confirmations).anchored
    assert (record.epoch, record.tx_hash, record.block_number) == (EPOCH, chain.receipts[EPOCH].tx_hash, 11)
    assert chain.sent == [EPOCH]  # recognised on chain by its event, never published again
    assert anchor_pass(session, chain, confirmations=confirmations) == type(first)([], [])


def test_a_later_epoch_is_published_while_an_earlier_one_waits(session: Session) -> None:
    chain = GrowingChain()
    closed_epoch(session, EPOCH)
    assert anchor_pass(session, chain, confirmations=3).waiting == [EPOCH]
    closed_epoch(session, EPOCH + 2)
    second = anchor_pass(session, chain, confirmations=3)
    assert second.waiting == [EPOCH, EPOCH + 2] and chain.sent == [EPOCH, EPOCH + 2]
    chain.mine(1)  # EPOCH is 3 deep now, EPOCH + 2 only 2
    third = anchor_pass(session, chain, confirmations=3)
    assert [a.epoch for a in third.anchored] == [EPOCH] and third.waiting == [EPOCH + 2]
