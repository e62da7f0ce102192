"""The epoch payout tree, pure: leaves of (epoch, payout address, amount), OpenZeppelin-compatible.

leaf = keccak256(keccak256(abi.encode(uint256 epoch, address account, uint256 amount))),
hashed twice so a leaf can never pass for an inner node. Inner nodes hash their two
children in sorted order, so a proof is just the sibling hashes (MerkleProof.verify in
the distributor contract checks the same). Leaves are sorted by hash; a level's odd last
node moves up unchanged. Anyone can rebuild the tree from the published payouts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from eth_hash.auto import keccak

from ledger.units import AMOUNT_MAX

WORD_BYTES = 32
LEAVES_MAX = 1_000_000  # operators paid in one epoch; the proof depth stays at most 20
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")


def valid_address(text: object) -> bool:
    return isinstance(text, str) and _ADDRESS.match(text) is not None


def normalize_address(text: str) -> str:
    """Lower-case hex with 0x: one spelling per address, so leaves and statements agree."""
    assert valid_address(text), f"not an Ethereum address: {text!r}"
    return "0x" + text[2:].lower()


@dataclass(frozen=True, order=True)
class PayoutLeaf:
    epoch: int
    address: str  # normalised, see normalize_address
    amount: int  # base units (the token has the ledger's 9 decimals)

    def __post_init__(self) -> None:
        assert type(self.epoch) is int and 0 <= self.epoch < 2**64
        assert valid_address(self.address) and self.address == normalize_address(self.address)
        assert type(self.amount) is int and 0 < self.amount <= AMOUNT_MAX


def leaf_hash(leaf: PayoutLeaf) -> bytes:
    encoded = (
        leaf.epoch.to_bytes(WORD_BYTES, "big")
        + bytes.fromhex(leaf.address[2:]).rjust(WORD_BYTES, b"\0")
        + leaf.amount.to_bytes(WORD_BYTES, "big")
    )
    return keccak(keccak(encoded))


def hash_pair(left: bytes, right: bytes) -> bytes:
    return keccak(min(left, right) + max(left, right))


@dataclass(frozen=True)
class PayoutTree:
    leaves: tuple[PayoutLeaf, ...]  # in tree order (sorted by leaf hash)
    levels: tuple[tuple[bytes, ...], ...]  # levels[0] are the leaf hashes, levels[-1] the root

    @property
    def root(self) -> bytes:
        return self.levels[-1][0]

    @property
    def total(self) -> int:
        return sum(leaf.amount for leaf in self.leaves)

    def proof(self, leaf: PayoutLeaf) -> tuple[bytes, ...]:
        index = self.leaves.index(leaf)
        siblings: list[bytes] = []
        for level in self.levels[:-1]:
            sibling = index ^ 1
            if sibling < len(level):
                siblings.append(level[sibling])
            index //= 2
        return tuple(siblings)


def build_tree(leaves: Sequence[PayoutLeaf]) -> PayoutTree:
    """The tree over one epoch's payouts; an address appears at most once per epoch."""
    assert 0 < len(leaves) <= LEAVES_MAX, f"a payout tree holds 1..{LEAVES_MAX} leaves"
    assert len({leaf.address for leaf in leaves}) == len(leaves), "one leaf per payout address"
    assert len({leaf.epoch for leaf in leaves}) == 1, "one epoch per tree"
    hashed = sorted((leaf_hash(leaf), leaf) for leaf in leaves)
    level = tuple(digest for digest, _ in hashed)
    levels = [level]
    while len(level) > 1:
        paired = [hash_pair(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = tuple(paired)
        levels.append(level)
    return PayoutTree(tuple(leaf for _, leaf in hashed), tuple(levels))


def root_from_proof(leaf: PayoutLeaf, proof: Sequence[bytes]) -> bytes:
    computed = leaf_hash(leaf)
    for sibling in proof:
        assert len(sibling) == WORD_BYTES, "proof elements are 32-byte hashes"
        computed = hash_pair(computed, sibling)
    return computed


def verify_proof(leaf: PayoutLeaf, proof: Sequence[bytes], root: bytes) -> bool:
    return root_from_proof(leaf, proof) == root
