"""Forgeries that someone with write access to the database can make, each caught.

The journal's hash is unkeyed, so a forger can re-hash every row after an edit, fix the
balances, the chain head and the head an epoch recorded. Each test below first shows the
unkeyed audit passing the forgery (what issue 28 found), then the signed heads or an
operator's kept statement catching it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from contracts.ids import JobId, OperatorId
from contracts.keyfile import KeySigner
from ledger import epochs, jobs
from ledger.audit import replayed_balances
from ledger.chain import GENESIS_HASH, linked
from ledger.full_audit import audit
from ledger.head_signatures import sign_head
from ledger.model import Transfer, TransferKind, TransferRequest
from ledger.policy import price_job
from ledger.statements import operator_statement, signed_statement, statement_problem
from ledger.storage import epoch_store, store, tables

HOUR_US = 3_600 * 1_000_000
EPOCH = 470_000
START_US = EPOCH * HOUR_US
CLOSE_US = START_US + HOUR_US + 1
PARAMETERS = 8 * 10**9
ALICE, BOB = OperatorId("alice"), OperatorId("bob")


@pytest.fixture
def signer() -> KeySigner:
    return KeySigner(Ed25519PrivateKey.generate())


def _job(session: Session, name: str, operator: OperatorId, at_us: int) -> None:
    job = JobId(name)
    assert jobs.complete_job(session, job, None, operator, price_job(PARAMETERS, 100, 50), hold_s=60,
                             now_us=at_us).ok
    assert jobs.release_job_credit(session, job, now_us=at_us + 10).ok


def closed_then_more(session: Session, signer: KeySigner) -> None:
    """Jobs for alice and bob, a signed epoch close that pays them, then more jobs after it."""
    for index, operator in enumerate((ALICE, BOB, ALICE)):
        _job(session, f"before-{index}", operator, START_US + 100 * index + 1)
    epochs.set_payout_address(session, "alice", "0x" + "a1" * 20)
    epochs.set_payout_address(session, "bob", "0x" + "b2" * 20)
    assert epochs.close_epoch(session, EPOCH, now_us=CLOSE_US, signer=signer).ok
    for index, operator in enumerate((BOB, ALICE)):
        _job(session, f"after-{index}", operator, CLOSE_US + 100 * index + 1)


def trusted(signer: KeySigner) -> frozenset[str]:
    return frozenset({signer.public_key_raw.hex()})


def all_transfers(session: Session) -> list[Transfer]:
    return list(store.scan_transfers(session, 1_000))


def rewrite(session: Session, edit: Callable[[list[Transfer]], list[Transfer]]) -> None:
    """The forger's tool: edit the journal, re-link every row from the genesis, then fix the
    balances, the chain head and each epoch's recorded head so they agree with the new rows."""
    old = all_transfers(session)
    new, prev_hash = [], GENESIS_HASH
    for sequence, transfer in enumerate(edit(list(old)), start=1):
        transfer = linked(transfer, sequence, prev_hash)
        new.append(transfer)
        prev_hash = transfer.hash
    table = tables.transfers
    for transfer in old:  # out of the way of the unique sequences first
        session.execute(update(table).where(table.c.id == transfer.id).values(sequence=-transfer.sequence))
    kept = {transfer.id for transfer in old}
    for transfer in new:
        row = store._transfer_to_row(transfer)
        if transfer.id in kept:
            session.execute(update(table).where(table.c.id == transfer.id).values(**row))
        else:
            session.execute(insert(table).values(**row))
    for transfer_id in kept - {transfer.id for transfer in new}:
        session.execute(delete(table).where(table.c.id == transfer_id))
    for account_id, balance in replayed_balances(session).items():
        session.execute(update(tables.accounts).where(tables.accounts.c.id == account_id).values(
            debits_pending=balance.debits_pending, debits_posted=balance.debits_posted,
            credits_pending=balance.credits_pending, credits_posted=balance.credits_posted))
    last = new[-1]
    session.execute(update(tables.chain_head).values(last_sequence=last.sequence, last_transfer_id=last.id,
                                                     last_hash=last.hash))
    by_id = {transfer.id: transfer for transfer in new}
    old_by_sequence = {transfer.sequence: transfer.id for transfer in old}
    for number, last_sequence in session.execute(select(tables.epochs.c.number, tables.epochs.c.last_sequence)):
        moved = by_id[old_by_sequence[last_sequence]]
        session.execute(update(tables.epochs).where(tables.epochs.c.number == number).values(
            last_sequence=moved.sequence, last_hash=moved.hash))


def test_the_honest_ledger_passes_with_its_signed_heads_and_a_kept_statement(
        session: Session, signer: KeySigner) -> None:
    closed_then_more(session, signer)
    kept = signed_statement(session, operator_statement(session, "bob"), signer, CLOSE_US + 1_000)
    assert statement_problem(kept, trusted(signer)) is None
    report = audit(session, trusted_keys=trusted(signer), statements=[kept])
    assert report.ok, report.differences
    assert report.epochs_checked == 1 and report.transfers_checked == len(all_transfers(session))


def test_a_rewrite_before_the_last_close_with_rehashed_rows_is_caught_by_the_signed_head(
        session: Session, signer: KeySigner) -> None:
    closed_then_more(session, signer)
    # Credit a job's pay to another job: every amount and balance stays, every hash after it changes.
    rewrite(session, lambda rows: [replace(t, job_id="forged") if t.job_id == "before-1" else t for t in rows])
    assert audit(session).ok  # the unkeyed audit: chain, balances and the recorded head all agree
    report = audit(session, trusted_keys=trusted(signer))
    assert [(d.check, d.subject) for d in report.differences] == [("signature", f"epoch {EPOCH}")]
    assert "head, root or total was changed" in report.differences[0].detail


def test_a_forged_row_with_a_correct_hash_and_fixed_balances_is_caught(session: Session, signer: KeySigner) -> None:
    closed_then_more(session, signer)
    forged = TransferRequest(id="gift", debit_account=jobs.ISSUANCE_REWARDS_ACCOUNT,
                             credit_account="operator:bob", amount=5 * 10**9, kind=TransferKind.CORRECTION)
    template = all_transfers(session)[0]

    def insert_gift(rows: list[Transfer]) -> list[Transfer]:
        gift = replace(template, id=forged.id, debit_account=forged.debit_account,
                       credit_account=forged.credit_account, amount=forged.amount, kind=forged.kind, job_id=None,
                       pending_id=None, policy_version=None)
        return [*rows[:3], gift, *rows[3:]]

    rewrite(session, insert_gift)
    # Whatever else the forger fixes (the unkeyed audit also sees bob's sweep no longer match his
    # balance), the head the coordinator signed at the close no longer matches.
    report = audit(session, trusted_keys=trusted(signer))
    assert ("signature", f"epoch {EPOCH}") in [(d.check, d.subject) for d in report.differences]


def test_a_rewrite_after_the_last_close_is_caught_by_an_operators_kept_statement(
        session: Session, signer: KeySigner) -> None:
    closed_then_more(session, signer)
    kept = signed_statement(session, operator_statement(session, "bob"), signer, CLOSE_US + 1_000)
    bobs = [line["id"] for line in kept["transfers"]]
    assert "after-0:credit" in bobs

    def inflate(rows: list[Transfer]) -> list[Transfer]:
        return [replace(t, amount=t.amount * 2) if t.job_id == "after-0" and t.pending_id is None else t
                for t in rows]

    rewrite(session, inflate)
    assert audit(session, trusted_keys=trusted(signer)).ok  # no signed head covers rows after the close
    report = audit(session, trusted_keys=trusted(signer), statements=[kept])
    subjects = [d.subject for d in report.differences if d.check == "statement"]
    credit = next(line for line in kept["transfers"] if line["id"] == "after-0:credit")
    assert f"sequence {credit['sequence']}" in subjects  # the first row it names that changed
    assert f"sequence {kept['head']['sequence']}" in subjects  # and the head it saw


def test_heads_resigned_with_another_key_are_not_trusted(session: Session, signer: KeySigner) -> None:
    closed_then_more(session, signer)
    forger = KeySigner(Ed25519PrivateKey.generate())
    rewrite(session, lambda rows: [replace(t, job_id="forged") if t.job_id == "before-1" else t for t in rows])
    epoch = epoch_store.read_epoch(session, EPOCH)
    assert epoch is not None
    resigned = sign_head(epoch, forger, CLOSE_US)
    session.execute(update(tables.head_signatures).values(public_key=resigned.public_key,
                                                          signature=resigned.signature))
    report = audit(session, trusted_keys=trusted(signer))
    assert [(d.check, d.subject) for d in report.differences] == [("signature", f"epoch {EPOCH}")]
    assert "not a trusted coordinator key" in report.differences[0].detail


def test_an_unsigned_epoch_is_reported_when_keys_are_given(session: Session, signer: KeySigner) -> None:
    _job(session, "before-0", ALICE, START_US + 1)
    epochs.set_payout_address(session, "alice", "0x" + "a1" * 20)
    assert epochs.close_epoch(session, EPOCH, now_us=CLOSE_US).ok  # no signer
    assert audit(session).ok
    report = audit(session, trusted_keys=trusted(signer))
    assert [(d.check, d.detail) for d in report.differences] == [
        ("signature", "the epoch's journal head is not signed")]


def test_a_deleted_middle_row_is_named_by_its_own_sequence(session: Session, signer: KeySigner) -> None:
    closed_then_more(session, signer)
    rows = all_transfers(session)
    gone = rows[len(rows) - 2]  # a middle row after the close: no payout row refers to it
    session.execute(delete(tables.transfers).where(tables.transfers.c.id == gone.id))
    chain = [d for d in audit(session).differences if d.check == "chain"]
    assert [d.subject for d in chain] == [f"sequence {gone.sequence}"]
    assert f"follows {gone.sequence - 1}" in chain[0].detail


def test_a_changed_statement_is_not_the_coordinators_word(session: Session, signer: KeySigner) -> None:
    closed_then_more(session, signer)
    kept = signed_statement(session, operator_statement(session, "alice", EPOCH), signer, CLOSE_US + 1_000)
    assert statement_problem(kept, trusted(signer)) is None
    assert kept["payout"] is not None
    changed = kept | {"payout": str(int(kept["payout"]) + 1)}
    assert "changed after signing" in (statement_problem(changed, trusted(signer)) or "")
    other = KeySigner(Ed25519PrivateKey.generate())
    assert "not a trusted" in (statement_problem(kept, trusted(other)) or "")
    report = audit(session, trusted_keys=trusted(signer), statements=[changed])
    assert [d.check for d in report.differences] == ["statement"]
