"""End to end against a real anvil process (ledger.anvil): anchors that survive a restart of the
chain, claims an operator makes with a statement's proof, and the audit reading the chain."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from ledger.anchor import PayoutChain
from ledger.anchoring import anchor_epochs, check_anchors
from ledger.anvil import AnvilProcess, anvil_binary, embedded_chain
from ledger.errors import ChainError
from ledger.full_audit import audit
from ledger.statements import leaf_from_bundle, operator_statement
from ledger.storage import tables
from tests.ledger.test_payout_chain import EPOCH, closed_epoch
from tests.ledger.test_tamper_evidence import rewrite


@pytest.fixture
def anvil_dir(tmp_path: Path) -> Iterator[Path]:
    if anvil_binary() is None:
        pytest.fail("the payout chain's e2e tests need anvil: `make anvil` installs @foundry-rs/anvil into .tools/")
    yield tmp_path / "anvil"


@pytest.fixture
def anchored(session: Session, anvil_dir: Path) -> Iterator[PayoutChain]:
    """A real anvil with epoch EPOCH closed in the ledger and anchored on it."""
    process, chain = embedded_chain(anvil_dir)
    try:
        closed_epoch(session, EPOCH)
        anchor_epochs(session, chain)
        yield chain
    finally:
        _stopped(process)


def _stopped(process: AnvilProcess) -> None:
    process.stop()
    assert process.process.returncode is not None


def test_anchors_survive_a_restart_of_the_chain_and_are_sent_once(session: Session, anvil_dir: Path) -> None:
    process, chain = embedded_chain(anvil_dir)
    try:
        closed_epoch(session, EPOCH)
        closed_epoch(session, EPOCH + 2)
        anchored = anchor_epochs(session, chain)
        assert [a.epoch for a in anchored] == [EPOCH, EPOCH + 2] and all(a.gas_used > 0 for a in anchored)
        roots = {number: chain.epoch_root(number) for number in (EPOCH, EPOCH + 2)}
    finally:
        _stopped(process)
    process, again = embedded_chain(anvil_dir)  # the same state file and contracts record
    try:
        assert again.distributor_address == chain.distributor_address
        assert {number: again.epoch_root(number) for number in roots} == roots
        assert anchor_epochs(session, again) == []  # recorded: nothing is sent twice
        # A crash after the transaction but before the commit: the root is on chain, not recorded.
        session.execute(delete(tables.epoch_anchors))
        recovered = anchor_epochs(session, again)
        assert [a.block_number for a in recovered] == [0, 0]  # recognised on chain, not published again
        assert check_anchors(session, again) == []
    finally:
        _stopped(process)


def test_an_unreachable_chain_delays_anchoring_and_loses_nothing(session: Session, anvil_dir: Path) -> None:
    process, chain = embedded_chain(anvil_dir)
    _stopped(process)
    closed_epoch(session, EPOCH)
    with pytest.raises(ChainError):
        anchor_epochs(session, chain)
    process, chain = embedded_chain(anvil_dir)
    try:
        assert [a.epoch for a in anchor_epochs(session, chain)] == [EPOCH]
    finally:
        _stopped(process)


def test_claim_once_with_the_statement_proof_and_a_forged_proof_is_refused(
        session: Session, anchored: PayoutChain) -> None:
    chain = anchored
    statement = operator_statement(session, "alice", EPOCH)
    assert statement is not None and statement.proof is not None
    leaf, proof, root = leaf_from_bundle(statement.proof)
    assert chain.epoch_root(EPOCH) == root
    with pytest.raises(ChainError):
        chain.claim(EPOCH, leaf.address, leaf.amount + 1, proof)  # a forged amount
    receipt = chain.claim(EPOCH, leaf.address, leaf.amount, proof)
    assert receipt.gas_used > 0 and chain.token_balance(leaf.address) == leaf.amount
    with pytest.raises(ChainError):
        chain.claim(EPOCH, leaf.address, leaf.amount, proof)  # the second claim
    assert chain.is_claimed(EPOCH, leaf.address) and chain.token_balance(leaf.address) == leaf.amount


def test_a_rewritten_root_is_caught_by_the_audit_through_the_chain(session: Session, anchored: PayoutChain) -> None:
    assert audit(session, chain=anchored).ok
    session.execute(update(tables.epochs).values(root="0x" + "ab" * 32))
    anchors = [d for d in audit(session, chain=anchored).differences if d.check == "anchor"]
    assert [d.subject for d in anchors] == [f"epoch {EPOCH}"]
    assert "the chain holds" in anchors[0].detail


def test_a_rewritten_journal_is_caught_through_the_anchored_head_without_any_key(
        session: Session, anchored: PayoutChain) -> None:
    rewrite(session, lambda rows: [replace(t, job_id="forged") if t.job_id == f"job-{EPOCH}-1" else t
                                   for t in rows])
    assert audit(session).ok  # re-hashed rows, fixed balances and recorded head: nothing local shows it
    anchors = [d for d in audit(session, chain=anchored).differences if d.check == "anchor"]
    assert [d.subject for d in anchors] == [f"epoch {EPOCH}"]
    assert "differs from the digest anchored on chain" in anchors[0].detail


def _rpc(url: str, method: str, params: list[object]) -> object:
    request = urllib.request.Request(url, json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                                                      "params": params}).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["result"]


def test_an_anchor_dropped_by_a_reorg_is_noticed_and_sent_again(session: Session, anvil_dir: Path) -> None:
    process, chain = embedded_chain(anvil_dir)
    try:
        closed_epoch(session, EPOCH)
        snapshot = _rpc(process.rpc_url, "evm_snapshot", [])
        (first,) = anchor_epochs(session, chain)
        assert _rpc(process.rpc_url, "evm_revert", [snapshot]) is True  # the block holding it is gone
        assert chain.epoch_root(EPOCH) is None
        (again,) = anchor_epochs(session, chain)
        assert again.epoch == EPOCH and again.gas_used > 0  # published again, not just recorded
        assert check_anchors(session, chain) == [] and anchor_epochs(session, chain) == []
    finally:
        _stopped(process)
