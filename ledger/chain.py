"""The hash chain over transfers: a canonical encoding and the link from one transfer to the next.

Each transfer's hash covers every field and the previous transfer's hash, so an edited,
inserted or deleted row breaks the chain at that point. Anchoring the chain head
elsewhere (an on-chain root, an operator's log) also catches a rewrite of the whole tail.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from ledger.model import Transfer

ENCODING_VERSION = "mlxnet-ledger-transfer-v1"
GENESIS_HASH = "0" * 64  # the prev_hash of the first transfer


def canonical_encoding(transfer: Transfer) -> bytes:
    """Every field but the hash itself, as a compact JSON array: unambiguous, nulls included."""
    return _encoding_at(transfer, transfer.sequence, transfer.prev_hash)


def _encoding_at(transfer: Transfer, sequence: int, prev_hash: str) -> bytes:
    """The encoding the transfer would have at `sequence` after `prev_hash` (the enums are str: their values)."""
    return encode_row((
        sequence, transfer.id, transfer.debit_account, transfer.credit_account, transfer.amount,
        transfer.state, transfer.pending_id, transfer.timeout_s, transfer.job_id, transfer.kind,
        transfer.policy_version, transfer.created_at_us, prev_hash,
    ))


_quote = json.encoder.encode_basestring_ascii  # what json.dumps(ensure_ascii=True) writes for a str


def encode_row(row: Sequence[Any]) -> bytes:
    """The encoding of a row (sequence, id, debit_account, credit_account, amount, state, pending_id,
    timeout_s, job_id, kind, policy_version, created_at_us, prev_hash), as stored.

    Byte for byte json.dumps([ENCODING_VERSION, *row], separators=(",", ":"), ensure_ascii=True),
    written out field by field because the audit encodes every transfer (tests/ledger/test_chain.py
    checks the two agree on any text and any integer).
    """
    (sequence, transfer_id, debit_account, credit_account, amount, state, pending_id, timeout_s, job_id, kind,
     policy_version, created_at_us, prev_hash) = row
    # The None tests are written inline: a helper call per field costs more than the rest of the line.
    return (
        f'["{ENCODING_VERSION}",{sequence:d},{_quote(transfer_id)},{_quote(debit_account)},{_quote(credit_account)},'
        f'{amount:d},{_quote(state)},{"null" if pending_id is None else _quote(pending_id)},{timeout_s:d},'
        f'{"null" if job_id is None else _quote(job_id)},{_quote(kind)},'
        f'{"null" if policy_version is None else _quote(policy_version)},{created_at_us:d},{_quote(prev_hash)}]'
    ).encode("ascii")


QUOTED_REMEMBERED_MAX = 65_536  # distinct account ids, states, kinds and policy versions kept quoted


def _remember_quoted(quoted: dict[str | None, str], values: tuple[str | None, ...]) -> None:
    """Add the JSON text of each value (None is null); once full, start over, so memory stays bounded."""
    if len(quoted) + len(values) > QUOTED_REMEMBERED_MAX:
        quoted.clear()
    for value in values:
        quoted[value] = "null" if value is None else _quote(value)


# The encoders below look the remembered text up in a plain dict and catch the KeyError of
# a value not seen before: a dict subclass with __missing__ makes every lookup go through
# a slower generic slot, and the audit does five per row.


def row_encoder() -> Callable[[Sequence[Any]], bytes]:
    """encode_row for a stream of new rows, in encode_row's order: what a batch of payments hashes.

    Account ids, states, kinds and policy versions repeat from row to row, so their quoted
    text is looked up, not rebuilt (tests/ledger/test_chain.py checks it against encode_row).
    """
    quoted: dict[str | None, str] = {}

    def encode(row: Sequence[Any]) -> bytes:
        (sequence, transfer_id, debit_account, credit_account, amount, state, pending_id, timeout_s, job_id, kind,
         policy_version, created_at_us, prev_hash) = row
        try:
            return (
                f'["{ENCODING_VERSION}",{sequence:d},{_quote(transfer_id)},{quoted[debit_account]},'
                f'{quoted[credit_account]},{amount:d},{quoted[state]},'
                f'{"null" if pending_id is None else _quote(pending_id)},{timeout_s:d},'
                f'{"null" if job_id is None else _quote(job_id)},{quoted[kind]},{quoted[policy_version]},'
                f'{created_at_us:d},{_quote(prev_hash)}]'
            ).encode("ascii")
        except KeyError:
            _remember_quoted(quoted, (debit_account, credit_account, state, kind, policy_version))
            return encode(row)  # every value it looks up is remembered now

    return encode


def stored_row_encoder() -> Callable[[Sequence[Any]], bytes]:
    """encode_row for a stream of stored rows (sequence, ..., prev_hash, hash), for the audit.

    The caller promises each row's prev_hash is a hash this module made (hex digits, which
    need no escaping) or GENESIS_HASH: the audit checks that link first. Account ids,
    states, kinds and policy versions repeat, so their quoted text is looked up, not rebuilt.
    The integers are written as str() writes them, not with the slower :d: a value that is
    not an int (SQLite stores what it is given) writes other text, so the row fails its hash
    check instead of raising here.
    """
    quoted: dict[str | None, str] = {}

    def encode(row: Sequence[Any]) -> bytes:
        (sequence, transfer_id, debit_account, credit_account, amount, state, pending_id, timeout_s, job_id, kind,
         policy_version, created_at_us, prev_hash, _hash) = row
        try:
            return (
                f'["{ENCODING_VERSION}",{sequence},{_quote(transfer_id)},{quoted[debit_account]},'
                f'{quoted[credit_account]},{amount},{quoted[state]},'
                f'{"null" if pending_id is None else _quote(pending_id)},{timeout_s},'
                f'{"null" if job_id is None else _quote(job_id)},{quoted[kind]},{quoted[policy_version]},'
                f'{created_at_us},"{prev_hash}"]'
            ).encode()  # UTF-8: the same bytes as ASCII for an honest row, and a non-ASCII text cannot raise
        except KeyError:
            _remember_quoted(quoted, (debit_account, credit_account, state, kind, policy_version))
            return encode(row)  # every value it looks up is remembered now

    return encode


def transfer_hash(transfer: Transfer) -> str:
    return hashlib.sha256(canonical_encoding(transfer)).hexdigest()


def row_hash(row: Sequence[Any]) -> str:
    """The hash of a row in encode_row's order: what the ledger stores as the row's `hash`."""
    return hashlib.sha256(encode_row(row)).hexdigest()


def linked(transfer: Transfer, sequence: int, prev_hash: str) -> Transfer:
    """The transfer placed at `sequence` after a transfer whose hash is `prev_hash`."""
    assert sequence >= 1 and len(prev_hash) == len(GENESIS_HASH)
    link_hash = hashlib.sha256(_encoding_at(transfer, sequence, prev_hash)).hexdigest()
    # Built field by field, not with dataclasses.replace: the ledger links every transfer it writes.
    return Transfer(sequence, transfer.id, transfer.debit_account, transfer.credit_account, transfer.amount,
                    transfer.state, transfer.pending_id, transfer.timeout_s, transfer.job_id, transfer.kind,
                    transfer.policy_version, transfer.created_at_us, prev_hash, link_hash)
