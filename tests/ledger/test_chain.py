"""The hash chain catches edits and deletions made behind the ledger's back (raw SQL)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.orm import Session

from ledger import book
from ledger.full_audit import audit
from ledger.chain import (
    ENCODING_VERSION,
    GENESIS_HASH,
    QUOTED_REMEMBERED_MAX,
    canonical_encoding,
    encode_row,
    linked,
    row_encoder,
    stored_row_encoder,
    transfer_hash,
)
from ledger.model import TransferKind, TransferRequest
from tests.ledger.helpers import ALICE, BOB, NOW_US, fund, open_accounts, reserve

TRANSFER_IDS = ["deposit-1", "t1", "t2", "r1", "p1", "t3"]


def build_ledger(session: Session) -> None:
    open_accounts(session)
    fund(session, ALICE, 1_000)
    for transfer_id in ("t1", "t2"):
        request = TransferRequest(id=transfer_id, debit_account=ALICE, credit_account=BOB, amount=10,
                                  kind=TransferKind.CORRECTION)
        assert book.create_transfer(session, request, now_us=NOW_US).ok
    reserve(session, "r1", 100)
    assert book.post_pending(session, "p1", "r1", 60, now_us=NOW_US).ok
    request = TransferRequest(id="t3", debit_account=ALICE, credit_account=BOB, amount=5, kind=TransferKind.CORRECTION)
    assert book.create_transfer(session, request, now_us=NOW_US).ok


def test_an_untouched_chain_verifies(session: Session) -> None:
    assert book.verify_chain(session).ok  # empty
    build_ledger(session)
    check = book.verify_chain(session)
    assert check.ok and check.transfers_checked == len(TRANSFER_IDS)
    assert book.verify_chain(session, batch_size=2).ok  # paging changes nothing
    assert book.verify_balances(session).ok


EDITS = [
    ("UPDATE ledger_transfers SET amount = amount + 1 WHERE id = 't2'", "t2"),
    ("UPDATE ledger_transfers SET credit_account = 'external:deposits' WHERE id = 't1'", "t1"),
    ("UPDATE ledger_transfers SET job_id = 'job-x' WHERE id = 'r1'", "r1"),
    ("UPDATE ledger_transfers SET created_at_us = created_at_us + 1 WHERE id = 'p1'", "p1"),
    ("UPDATE ledger_transfers SET prev_hash = hash WHERE id = 't3'", "t3"),
    ("UPDATE ledger_transfers SET hash = prev_hash WHERE id = 't1'", "t1"),
    ("DELETE FROM ledger_transfers WHERE id = 't1'", "t2"),  # found at its successor
    ("DELETE FROM ledger_transfers WHERE id = 't3'", "t3"),  # the tail: found through the head
]


@pytest.mark.parametrize(("statement", "first_bad"), EDITS)
def test_an_edited_row_is_found(session: Session, statement: str, first_bad: str) -> None:
    build_ledger(session)
    session.execute(text(statement))
    check = book.verify_chain(session)
    assert not check.ok and check.first_bad_transfer_id == first_bad, check.reason


# The full audit names a deleted middle row by its own sequence (deposit-1 is 1, t1 is 2).
AUDIT_EDITS = [(statement, "sequence 2" if statement.endswith("id = 't1'") and statement.startswith("DELETE")
                else first_bad) for statement, first_bad in EDITS]


@pytest.mark.parametrize(("statement", "first_bad"), AUDIT_EDITS)
def test_the_full_audit_names_the_edited_row_first(session: Session, statement: str, first_bad: str) -> None:
    build_ledger(session)
    session.execute(text(statement))
    chain_differences = [d for d in audit(session).differences if d.check == "chain"]
    assert [d.subject for d in chain_differences] == [first_bad], chain_differences


@pytest.mark.parametrize("value", ["created_at_us + 0.5", "'1000'", "'10é0'", "x'31303030'"])
def test_a_non_integer_in_an_integer_column_is_reported_as_an_edit(session: Session, value: str) -> None:
    """SQLite stores a float, a text or a blob in any column; the audit names the row, it does not stop."""
    if session.get_bind().dialect.name != "sqlite":
        pytest.skip("PostgreSQL's bigint columns hold only integers")
    build_ledger(session)
    session.execute(text(f"UPDATE ledger_transfers SET created_at_us = {value} WHERE id = 't2'"))
    differences = audit(session).differences
    assert [(d.check, d.subject) for d in differences] == [("chain", "t2")], differences


def test_a_deleted_row_is_found_at_its_successor(session: Session) -> None:
    build_ledger(session)
    session.execute(text("DELETE FROM ledger_transfers WHERE id = 't1'"))
    check = book.verify_chain(session)
    assert not check.ok and check.first_bad_transfer_id == "t2"
    assert "missing" in check.reason


def test_a_deleted_tail_is_found_through_the_head(session: Session) -> None:
    build_ledger(session)
    session.execute(text("DELETE FROM ledger_transfers WHERE id = 't3'"))
    check = book.verify_chain(session)
    assert not check.ok and check.first_bad_transfer_id == "t3"


def test_a_rehashed_edit_breaks_the_next_link(session: Session) -> None:
    """Recomputing the edited row's own hash is not enough: its successor still names the old one."""
    build_ledger(session)
    forged = replace(book.get_transfer(session, "t1"), amount=11)  # type: ignore[arg-type]
    session.execute(
        text("UPDATE ledger_transfers SET amount = 11, hash = :hash WHERE id = 't1'"),
        {"hash": transfer_hash(forged)},
    )
    check = book.verify_chain(session)
    assert not check.ok and check.first_bad_transfer_id == "t2"
    assert not book.verify_balances(session).ok  # and the stored balances no longer match the replay


def test_a_forged_append_without_the_head_is_found(session: Session) -> None:
    build_ledger(session)
    last = book.get_transfer(session, "t3")
    assert last is not None
    forged = linked(replace(last, id="t4"), last.sequence + 1, last.hash)
    session.execute(
        text(
            "INSERT INTO ledger_transfers (id, sequence, debit_account, credit_account, amount, state, pending_id,"
            " timeout_s, job_id, kind, policy_version, created_at_us, prev_hash, hash) VALUES (:id, :sequence,"
            " :debit, :credit, 5, 'posted', NULL, 0, NULL, 'correction', NULL, :created, :prev, :hash)"
        ),
        {"id": "t4", "sequence": forged.sequence, "debit": ALICE, "credit": BOB, "created": forged.created_at_us,
         "prev": forged.prev_hash, "hash": forged.hash},
    )
    check = book.verify_chain(session)
    assert not check.ok and check.first_bad_transfer_id == "t4"


def test_balances_edited_behind_the_ledger_are_found(session: Session) -> None:
    build_ledger(session)
    session.execute(text("UPDATE ledger_accounts SET credits_posted = credits_posted + 1 WHERE id = :id"), {"id": BOB})
    assert book.verify_balances(session).mismatched_account_ids == (BOB,)
    assert book.verify_chain(session).ok  # the chain covers transfers; balances have their own audit


def test_the_encoding_is_canonical_and_starts_from_genesis(session: Session) -> None:
    build_ledger(session)
    first = book.get_transfer(session, "deposit-1")
    assert first is not None and first.prev_hash == GENESIS_HASH and first.sequence == 1
    assert canonical_encoding(first).startswith(b'["mlxnet-ledger-transfer-v1",1,"deposit-1",')
    assert transfer_hash(first) == first.hash


texts = st.text()  # any text at all: the audit reads rows a tamperer may have written
integers = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(st.tuples(integers, texts, texts, texts, integers, texts, st.none() | texts, integers, st.none() | texts,
                 texts, st.none() | texts, integers, texts))
def test_the_row_encoding_is_exactly_compact_ascii_json(row: tuple) -> None:  # type: ignore[type-arg]
    expected = json.dumps([ENCODING_VERSION, *row], separators=(",", ":"), ensure_ascii=True).encode("ascii")
    assert encode_row(row) == expected


hex_hashes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@given(st.lists(st.tuples(integers, texts, texts, texts, integers, texts, st.none() | texts, integers,
                          st.none() | texts, texts, st.none() | texts, integers, hex_hashes, texts), max_size=8))
def test_the_audit_encoder_is_encode_row_for_linked_rows(rows: list) -> None:  # type: ignore[type-arg]
    encode = stored_row_encoder()  # one encoder over many rows: what it remembers must not leak between them
    for row in rows:
        assert encode(row) == encode_row(row[:13])


@given(st.lists(st.tuples(integers, texts, texts, texts, integers, texts, st.none() | texts, integers,
                          st.none() | texts, texts, st.none() | texts, integers, texts), max_size=8))
def test_the_new_row_encoder_is_encode_row(rows: list) -> None:  # type: ignore[type-arg]
    encode = row_encoder()  # one encoder over many rows, as a batch of payments uses it
    for row in rows:
        assert encode(row) == encode_row(row)


def test_the_encoders_stay_exact_past_the_remembered_limit() -> None:
    """More distinct account ids than the encoders remember: they start over and still encode exactly."""
    rows = [(sequence, f"t{sequence}", f"a{sequence}", f"b{sequence}", 1, "posted", None, 0, None, "correction",
             f"v{sequence % 3}", 1, GENESIS_HASH) for sequence in range(1, QUOTED_REMEMBERED_MAX // 2 + 2)]
    new_rows, stored = row_encoder(), stored_row_encoder()
    for row in rows:
        assert new_rows(row) == stored((*row, "")) == encode_row(row)


def test_only_the_ascii_space_is_printable_whitespace() -> None:
    # valid_id relies on it: isprintable() plus no " " refuses every whitespace character.
    printable_spaces = [code for code in range(sys.maxunicode + 1) if chr(code).isspace() and chr(code).isprintable()]
    assert printable_spaces == [ord(" ")]


@pytest.mark.parametrize(
    ("debit", "pending_id", "subject", "words"),
    [
        ("account:nobody", None, "account:nobody", "an account that does not exist"),
        (ALICE, "never-reserved", "t4", "not an open pending transfer"),
    ],
)
def test_a_well_chained_transfer_that_points_nowhere_is_named_by_the_audit(
        session: Session, debit: str, pending_id: str | None, subject: str, words: str) -> None:
    """No foreign keys guard these columns (0008): the rules refuse such transfers, the audit names them."""
    build_ledger(session)
    last = book.get_transfer(session, "t3")
    assert last is not None
    forged = linked(replace(last, id="t4", debit_account=debit, pending_id=pending_id), last.sequence + 1, last.hash)
    session.execute(
        text(
            "INSERT INTO ledger_transfers (id, sequence, debit_account, credit_account, amount, state, pending_id,"
            " timeout_s, job_id, kind, policy_version, created_at_us, prev_hash, hash) VALUES (:id, :sequence,"
            " :debit, :credit, :amount, :state, :pending, 0, NULL, 'correction', NULL, :created, :prev, :hash)"
        ),
        {"id": "t4", "sequence": forged.sequence, "debit": debit, "credit": BOB, "amount": forged.amount,
         "state": forged.state.value, "pending": pending_id, "created": forged.created_at_us, "prev": forged.prev_hash,
         "hash": forged.hash},
    )
    session.execute(text("UPDATE ledger_chain_head SET last_sequence = :sequence, last_transfer_id = 't4',"
                         " last_hash = :hash"), {"sequence": forged.sequence, "hash": forged.hash})
    assert book.verify_chain(session).ok  # the chain itself is intact: only the references are wrong
    report = audit(session)
    assert any(d.subject == subject and words in d.detail for d in report.differences), report.differences
