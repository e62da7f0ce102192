"""The hash chain over transfers: a canonical encoding and the link from one transfer to the next.

Each transfer's hash covers every field and the previous transfer's hash, so an edited,
inserted or deleted row breaks the chain at that point. Anchoring the chain head
elsewhere (an on-chain root, an operator's log) also catches a rewrite of the whole tail.
"""

from __future__ import annotations

import hashlib
import json

from ledger.model import Transfer

ENCODING_VERSION = "mlxnet-ledger-transfer-v1"
GENESIS_HASH = "0" * 64  # the prev_hash of the first transfer


def canonical_encoding(transfer: Transfer) -> bytes:
    """Every field but the hash itself, as a compact JSON array: unambiguous, nulls included."""
    return _encoding_at(transfer, transfer.sequence, transfer.prev_hash)


def _encoding_at(transfer: Transfer, sequence: int, prev_hash: str) -> bytes:
    """The encoding the transfer would have at `sequence` after `prev_hash`."""
    return encode_fields([
        ENCODING_VERSION,
        sequence,
        transfer.id,
        transfer.debit_account,
        transfer.credit_account,
        transfer.amount,
        str(transfer.state),
        transfer.pending_id,
        transfer.timeout_s,
        transfer.job_id,
        str(transfer.kind),
        transfer.policy_version,
        transfer.created_at_us,
        prev_hash,
    ])


# Exactly json.dumps(fields, separators=(",", ":"), ensure_ascii=True), built once: the audit
# encodes every transfer, and json.dumps would build a new encoder each time.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)


def encode_fields(fields: list[object]) -> bytes:
    """The encoding of [ENCODING_VERSION, sequence, id, ..., prev_hash]; the audit's fast path calls it directly."""
    return _ENCODER.encode(fields).encode("ascii")


def transfer_hash(transfer: Transfer) -> str:
    return hashlib.sha256(canonical_encoding(transfer)).hexdigest()


def linked(transfer: Transfer, sequence: int, prev_hash: str) -> Transfer:
    """The transfer placed at `sequence` after a transfer whose hash is `prev_hash`."""
    assert sequence >= 1 and len(prev_hash) == len(GENESIS_HASH)
    link_hash = hashlib.sha256(_encoding_at(transfer, sequence, prev_hash)).hexdigest()
    # Built field by field, not with dataclasses.replace: the ledger links every transfer it writes.
    return Transfer(sequence, transfer.id, transfer.debit_account, transfer.credit_account, transfer.amount,
                    transfer.state, transfer.pending_id, transfer.timeout_s, transfer.job_id, transfer.kind,
                    transfer.policy_version, transfer.created_at_us, prev_hash, link_hash)
