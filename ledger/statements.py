"""Operator statements: every transfer of one operator in an epoch, its seat results, payout and proof.

A statement shows one operator's own account only. Its proof bundle (JSON) is what
`mlxnet ledger verify-proof` checks against the chain, with no trust in the coordinator.
Signed by the coordinator's key (signed_statement), it is evidence the operator keeps: the
audit checks the journal still holds every hash it names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from ledger.storage import epoch_store, store
from ledger.book import JobStep, job_transfer_id
from ledger.storage.epoch_store import EpochRecord, PayoutRecord
from ledger.epochs import epoch_tree, payout_leaves
from ledger.head_signatures import HeadSigner, signature_valid
from ledger.merkle import PayoutLeaf, normalize_address, root_from_proof, valid_address
from ledger.model import Transfer, TransferKind
from ledger.policy import BPS_ONE
from ledger.seats import SeatOutcome
from ledger.units import AMOUNT_MAX

STATEMENT_LINES_MAX = 100_000
PROOF_FORMAT = "mlxnet-payout-proof-v1"


@dataclass(frozen=True)
class StatementLine:
    transfer: Transfer
    consumer_charge: int | None  # what the job's consumer was charged, when it had a reservation

    @property
    def share_bps(self) -> int | None:
        if not self.consumer_charge or self.transfer.kind is not TransferKind.JOB_OPERATOR_CREDIT:
            return None
        return self.transfer.amount * BPS_ONE // self.consumer_charge


@dataclass(frozen=True)
class Statement:
    operator_id: str
    epoch: EpochRecord | None  # None: the open epoch, not closed yet
    lines: tuple[StatementLine, ...]
    seats: tuple[SeatOutcome, ...]
    payout: PayoutRecord | None
    proof: dict[str, Any] | None  # the proof bundle, when the epoch paid this operator
    payout_address: str | None


def operator_statement(session: Session, operator_id: str, epoch: int | None = None) -> Statement | None:
    """None when `epoch` was never closed."""
    account_id = f"operator:{operator_id}"
    if epoch is None:
        record, last = None, epoch_store.last_epoch(session)
        after_us, until_us = (0 if last is None else last.cutoff_us), 2**63 - 1
    else:
        record = epoch_store.read_epoch(session, epoch)
        if record is None:
            return None
        previous = epoch_store.previous_epoch(session, epoch)
        after_us, until_us = (0 if previous is None else previous.cutoff_us), record.cutoff_us
    transfers = epoch_store.transfers_in_window(session, account_id, after_us, until_us, STATEMENT_LINES_MAX)
    lines = tuple(StatementLine(t, _consumer_charge(session, t)) for t in transfers)
    seats = () if record is None else tuple(epoch_store.seat_outcomes(session, record.number, operator_id))
    payout = None if record is None else next(
        (p for p in epoch_store.payouts(session, record.number) if p.operator_id == operator_id), None)
    proof = None if payout is None or record is None else proof_bundle(session, record, payout.address)
    return Statement(operator_id, record, lines, seats, payout, proof,
                     epoch_store.payout_address(session, operator_id))


def _consumer_charge(session: Session, transfer: Transfer) -> int | None:
    if transfer.job_id is None or transfer.kind is not TransferKind.JOB_OPERATOR_CREDIT:
        return None
    charge = store.read_transfer(session, job_transfer_id(transfer.job_id, JobStep.POST))
    return None if charge is None else charge.amount


def proof_bundle(session: Session, epoch: EpochRecord, address: str) -> dict[str, Any] | None:
    tree = epoch_tree(session, epoch.number)
    leaf = next((leaf for leaf in payout_leaves(epoch.number, epoch_store.payouts(session, epoch.number))
                 if leaf.address == address), None)
    if tree is None or leaf is None:
        return None
    return {
        "format": PROOF_FORMAT,
        "epoch": epoch.number,
        "address": leaf.address,
        "amount": str(leaf.amount),  # text: JSON readers lose digits past 2**53
        "proof": ["0x" + sibling.hex() for sibling in tree.proof(leaf)],
        "root": epoch.root,
    }


def leaf_from_bundle(bundle: dict[str, Any]) -> tuple[PayoutLeaf, tuple[bytes, ...], bytes]:
    """(leaf, proof, claimed root) from a proof bundle; ValueError says what is malformed."""
    try:
        if bundle["format"] != PROOF_FORMAT:
            raise ValueError(f"unknown proof format {bundle['format']!r}; expected {PROOF_FORMAT}")
        if not valid_address(bundle["address"]):
            raise ValueError(f"malformed proof bundle: {bundle['address']!r} is not an address (0x + 40 hex digits)")
        epoch, amount = int(bundle["epoch"]), int(bundle["amount"])
        if not (0 <= epoch < 2**64 and 0 < amount <= AMOUNT_MAX):
            raise ValueError("malformed proof bundle: epoch or amount out of range")
        leaf = PayoutLeaf(epoch, normalize_address(bundle["address"]), amount)
        proof = tuple(bytes.fromhex(item.removeprefix("0x")) for item in bundle["proof"])
        root = bytes.fromhex(str(bundle["root"]).removeprefix("0x"))
    except (KeyError, TypeError) as error:
        raise ValueError(f"malformed proof bundle: {error!r}") from error
    if any(len(item) != 32 for item in proof) or len(root) != 32:
        raise ValueError("malformed proof bundle: hashes must be 32 bytes")
    return leaf, proof, root


def bundle_root(bundle: dict[str, Any]) -> bytes:
    leaf, proof, _ = leaf_from_bundle(bundle)
    return root_from_proof(leaf, proof)


STATEMENT_FORMAT = "mlxnet-operator-statement-v1"


def signed_statement(session: Session, statement: Statement, signer: HeadSigner, now_us: int) -> dict[str, Any]:
    """The statement as a JSON document an operator keeps, signed by the coordinator's key.

    It names the journal head at the time (sequence and hash) and each of the operator's
    transfers by sequence and hash, so `mlxnet ledger audit --statement FILE` later shows
    any rewrite of the journal up to that head, even one with every row re-hashed.
    """
    head = store.read_chain_head(session)
    document: dict[str, Any] = {
        "format": STATEMENT_FORMAT,
        "operator": statement.operator_id,
        "epoch": None if statement.epoch is None else statement.epoch.number,
        "root": None if statement.epoch is None else statement.epoch.root,
        "head": {"sequence": head.last_sequence, "hash": head.last_hash},
        "transfers": [{"id": line.transfer.id, "sequence": line.transfer.sequence, "hash": line.transfer.hash,
                       "kind": str(line.transfer.kind), "state": str(line.transfer.state),
                       "amount": str(line.transfer.amount), "job_id": line.transfer.job_id}
                      for line in statement.lines],
        "payout": None if statement.payout is None else str(statement.payout.amount),
        "signed_at_us": now_us,
        "public_key": signer.public_key_raw.hex(),
    }
    document["signature"] = signer.sign(statement_message(document)).hex()
    return document


def statement_message(document: dict[str, Any]) -> bytes:
    """What the signature covers: every field but the signature, as sorted compact JSON."""
    unsigned = {key: value for key, value in document.items() if key != "signature"}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def statement_problem(document: dict[str, Any], trusted_keys: frozenset[str]) -> str | None:
    """Why a kept statement is not the coordinator's word, or None when it is."""
    if not isinstance(document, dict) or document.get("format") != STATEMENT_FORMAT:
        return f"not a signed statement (format {STATEMENT_FORMAT})"
    public_key, signature = document.get("public_key"), document.get("signature")
    if not isinstance(public_key, str) or not isinstance(signature, str):
        return "the statement carries no public key or signature"
    if public_key not in trusted_keys:
        return f"the statement is signed by key {public_key}, which is not a trusted coordinator key"
    if not signature_valid(public_key, statement_message(document), signature):
        return "the signature does not match the statement: it was changed after signing"
    return None


def statement_marks(document: dict[str, Any]) -> list[tuple[int, str, str]]:
    """(sequence, hash, what) for each journal position the statement vouches for; ValueError when malformed."""
    try:
        marks = [(int(document["head"]["sequence"]), str(document["head"]["hash"]), "the journal head")]
        marks.extend((int(item["sequence"]), str(item["hash"]), f"transfer {item['id']}")
                     for item in document["transfers"])
    except (KeyError, TypeError) as error:
        raise ValueError(f"malformed statement: {error!r}") from error
    return [mark for mark in marks if mark[0] > 0]
