"""Anchoring epoch roots on the in-process chain, claiming with proofs, statements and the full audit."""

from __future__ import annotations

import pytest
from sqlalchemy import text, update
from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger import epochs, jobs
from ledger.storage import tables
from ledger.anchor import ChainError, PayoutChain
from ledger.anchoring import AnchorMismatchError, anchor_epochs
from ledger.full_audit import ExpectedCredit, audit
from ledger.merkle import PayoutLeaf, build_tree
from ledger.policy import price_job
from ledger.statements import leaf_from_bundle, operator_statement

HOUR_US = 3_600 * 1_000_000
EPOCH = 480_000
START_US = EPOCH * HOUR_US
CLOSE_US = START_US + HOUR_US + 1
PARAMETERS = 8 * 10**9
ADDRESSES = {"alice": "0x" + "a1" * 20, "bob": "0x" + "b2" * 20}


@pytest.fixture(scope="module")
def chain() -> PayoutChain:
    return PayoutChain.in_process()


def closed_epoch(session: Session, number: int = EPOCH) -> list[ExpectedCredit]:
    start_us = number * HOUR_US
    expected = []
    for index, operator in enumerate(("alice", "bob", "alice")):
        job = JobId(f"job-{number}-{index}")
        prompt, completion = 100 + index, 50 * (index + 1)
        price = price_job(PARAMETERS, prompt, completion)
        assert jobs.complete_job(session, job, None, OperatorId(operator), price, hold_s=60,
                                 now_us=start_us + index + 1).ok
        assert jobs.release_job_credit(session, job, now_us=start_us + 100 + index).ok
        expected.append(ExpectedCredit(job, operator, PARAMETERS, prompt, completion))
    for operator, address in ADDRESSES.items():
        epochs.set_payout_address(session, operator, address)
    assert epochs.close_epoch(session, number, now_us=start_us + HOUR_US + 1).ok
    return expected


def test_anchor_then_claim_with_the_statement_proof(session: Session, chain: PayoutChain) -> None:
    number = EPOCH + 10 + (0 if session.bind.dialect.name == "sqlite" else 1)  # type: ignore[union-attr]
    closed_epoch(session, number)
    (anchor,) = anchor_epochs(session, chain)
    assert anchor.epoch == number and anchor.gas_used > 0
    assert anchor_epochs(session, chain) == []
    statement = operator_statement(session, "alice", number)
    assert statement is not None and statement.proof is not None and statement.payout is not None
    assert len([line for line in statement.lines if line.transfer.job_id]) == 4  # 2 holds, 2 releases
    leaf, proof, root = leaf_from_bundle(statement.proof)
    assert chain.epoch_root(number) == root and chain.verify(number, leaf.address, leaf.amount, proof)
    assert not chain.verify(number, leaf.address, leaf.amount + 1, proof)
    claim = chain.claim(number, leaf.address, leaf.amount, proof)
    assert claim.gas_used > 0 and chain.token_balance(leaf.address) >= leaf.amount
    with pytest.raises(ChainError, match="refused"):
        chain.claim(number, leaf.address, leaf.amount, proof)
    assert audit(session, chain=chain).ok


def test_a_different_root_on_chain_is_never_overwritten(session: Session, chain: PayoutChain) -> None:
    number = EPOCH + 20 + (0 if session.bind.dialect.name == "sqlite" else 1)  # type: ignore[union-attr]
    other = build_tree([PayoutLeaf(number, "0x" + "cc" * 20, 5)])
    chain.publish(number, other.root, other.total, b"\x01" * 32)
    closed_epoch(session, number)
    with pytest.raises(AnchorMismatchError):
        anchor_epochs(session, chain)
    report = audit(session, chain=chain)
    assert [d.check for d in report.differences] == ["anchor"]


def test_the_audit_passes_and_recomputes_credits_from_receipts(session: Session) -> None:
    expected = closed_epoch(session)
    report = audit(session, expected_credits=expected)
    assert report.ok, report.differences
    assert report.transfers_checked > 0 and report.epochs_checked == 1 and report.credits_checked == 3
    wrong = [ExpectedCredit(e.job_id, e.operator_id, e.parameter_count, e.prompt_tokens + 1, e.completion_tokens)
             for e in expected[:1]] + expected[1:]
    differences = audit(session, expected_credits=wrong).differences
    assert [(d.check, d.subject) for d in differences] == [("credit", f"{expected[0].job_id}:credit")]


def test_the_audit_names_a_hand_edited_transfer(session: Session) -> None:
    closed_epoch(session)
    victim = f"job-{EPOCH}-1:credit"
    session.execute(update(tables.transfers).where(tables.transfers.c.id == victim).values(amount=1))
    checks = {(d.check, d.subject) for d in audit(session).differences}
    assert ("chain", victim) in checks
    assert any(check == "balance" for check, _ in checks)


def test_the_audit_catches_a_deleted_payout(session: Session) -> None:
    closed_epoch(session)
    session.execute(text("DELETE FROM ledger_epoch_payouts WHERE operator_id = 'bob'"))
    differences = audit(session).differences
    assert [(d.check, d.subject) for d in differences] == [("epoch", f"epoch {EPOCH}")]


def test_a_statement_for_an_unclosed_epoch_is_none_and_the_open_one_lists_new_work(session: Session) -> None:
    closed_epoch(session)
    assert operator_statement(session, "alice", EPOCH + 1) is None
    price = price_job(PARAMETERS, 10, 10)
    jobs.complete_job(session, JobId("job-open"), None, OperatorId("alice"), price, hold_s=60,
                      now_us=CLOSE_US + 10)
    open_statement = operator_statement(session, "alice")
    assert open_statement is not None and [line.transfer.job_id for line in open_statement.lines] == ["job-open"]
    assert open_statement.proof is None and open_statement.payout_address == ADDRESSES["alice"]
    assert jobs.reserve_job(session, JobId("job-x"), ConsumerId("nobody"), 5).code.value == "debit_account_not_found"


@pytest.mark.parametrize("change", [{"address": "0x12"}, {"amount": "-5"}, {"proof": ["0x00"]}, {"format": "v0"}])
def test_a_malformed_proof_bundle_is_refused_with_a_reason(change: dict[str, object]) -> None:
    bundle = {"format": "mlxnet-payout-proof-v1", "epoch": 1, "address": "0x" + "ab" * 20, "amount": "5",
              "proof": [], "root": "0x" + "00" * 32} | change
    with pytest.raises(ValueError, match="proof"):
        leaf_from_bundle(bundle)
