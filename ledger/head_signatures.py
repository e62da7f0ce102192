"""Signed journal heads: what the database alone cannot forge.

Each transfer's hash covers the one before it, but the hash is unkeyed: someone who can
write the database can rewrite a row, re-hash every row after it, fix the balances and the
epoch's recorded head, and the chain checks out again. So at every epoch close the
coordinator signs the epoch's record (its journal head, root and total) with its Ed25519
key, and operators keep signed statements (ledger.statements) naming the head they saw.
The audit checks both against a key that is kept outside the database: a rewrite of any
row at or before a signed head then shows, however well the rows were re-hashed.

Pure: the signer is injected, and verification is contracts.signing's.
"""

from __future__ import annotations

import hashlib
import json
from typing import Protocol

from contracts.signing import PUBLIC_KEY_BYTES, SIGNATURE_BYTES, signature_is_valid
from ledger.storage.epoch_store import EpochRecord, SignedHead

HEAD_FORMAT = "mlxnet-ledger-epoch-head-v1"


class HeadSigner(Protocol):
    """The coordinator's key: its public half, and a way to sign with the private one."""

    @property
    def public_key_raw(self) -> bytes: ...

    def sign(self, message: bytes) -> bytes: ...


def head_message(epoch: EpochRecord) -> bytes:
    """Every field of the epoch's record, as a compact JSON array behind a format tag."""
    fields = [HEAD_FORMAT, epoch.number, epoch.length_s, epoch.cutoff_us, epoch.policy_version, epoch.root,
              str(epoch.total), epoch.leaf_count, epoch.last_sequence, epoch.last_hash]
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def head_digest(epoch: EpochRecord) -> bytes:
    """What is anchored on chain beside the epoch's root: sha256 of head_message."""
    return hashlib.sha256(head_message(epoch)).digest()


def sign_head(epoch: EpochRecord, signer: HeadSigner, now_us: int) -> SignedHead:
    public_key = signer.public_key_raw
    assert len(public_key) == PUBLIC_KEY_BYTES, "an Ed25519 public key is 32 bytes"
    signature = signer.sign(head_message(epoch))
    assert len(signature) == SIGNATURE_BYTES
    return SignedHead(epoch.number, public_key.hex(), signature.hex(), now_us)


def signature_valid(public_key_hex: str, message: bytes, signature_hex: str) -> bool:
    """Whether the hex signature verifies the message under the hex public key (False when malformed)."""
    try:
        return signature_is_valid(bytes.fromhex(public_key_hex), message, bytes.fromhex(signature_hex))
    except ValueError:
        return False


def head_problem(epoch: EpochRecord, signed: SignedHead | None, trusted_keys: frozenset[str]) -> str | None:
    """Why the epoch's record is not vouched for by a trusted key, or None when it is."""
    if signed is None:
        return "the epoch's journal head is not signed"
    if signed.public_key not in trusted_keys:
        return f"the epoch's head is signed by key {signed.public_key}, which is not a trusted coordinator key"
    if not signature_valid(signed.public_key, head_message(epoch), signed.signature):
        return "the coordinator's signature does not match the epoch's record: its head, root or total was changed"
    return None
