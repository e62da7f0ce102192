"""End to end against a real anvil process (ledger.anvil): anchors that survive a restart of the
chain, claims an operator makes with a statement's proof, and the audit reading the chain."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from eth_account import Account
from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from coordinator.money.epochs import PayoutChains
from ledger.anchor import PayoutChain
from ledger.anchoring import anchor_epochs, anchor_pass, check_anchors
from ledger.chain_settings import GasCaps, chain_settings
from ledger.publisher_key import publisher_key
from ledger.anvil import AnvilProcess, anvil_binary, embedded_chain
from ledger.errors import ChainError, ChainSettingsError
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
        # Recognised on chain by its event, not published again: the first transactions are recorded.
        assert [(a.tx_hash, a.block_number) for a in recovered] == [(a.tx_hash, a.block_number) for a in anchored]
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


def test_an_anchor_waits_for_its_confirmations_on_anvil(session: Session, anvil_dir: Path) -> None:
    process, chain = embedded_chain(anvil_dir)
    try:
        closed_epoch(session, EPOCH)
        first = anchor_pass(session, chain, confirmations=3)
        assert first.anchored == [] and first.waiting == [EPOCH] and chain.epoch_root(EPOCH) is not None
        sent = chain.publication(EPOCH)
        assert sent is not None and sent.gas_used > 0
        _rpc(process.rpc_url, "evm_mine", [])
        assert anchor_pass(session, chain, confirmations=3).waiting == [EPOCH]  # 2 of 3
        _rpc(process.rpc_url, "evm_mine", [])
        (record,) = anchor_pass(session, chain, confirmations=3).anchored
        assert (record.tx_hash, record.block_number) == (sent.tx_hash, sent.block_number)
        assert chain.block_number() == sent.block_number + 2  # sent once: only the two mined blocks since
    finally:
        _stopped(process)


def test_a_dropped_transaction_is_sent_again_and_a_late_one_is_recognised(session: Session, anvil_dir: Path) -> None:
    process, chain = embedded_chain(anvil_dir, receipt_timeout_s=1.0)
    try:
        closed_epoch(session, EPOCH)
        closed_epoch(session, EPOCH + 2)
        assert _rpc(process.rpc_url, "evm_setAutomine", [False]) is None
        with pytest.raises(ChainError, match="failed"):  # no receipt in time: the pass ends, nothing recorded
            anchor_pass(session, chain)
        assert _rpc(process.rpc_url, "anvil_dropAllTransactions", []) is None  # the node forgot it
        assert _rpc(process.rpc_url, "evm_setAutomine", [True]) is None
        assert chain.epoch_root(EPOCH) is None
        (again, late) = anchor_pass(session, chain, limit=2).anchored
        assert again.epoch == EPOCH and again.gas_used > 0 and late.epoch == EPOCH + 2
        # A transaction stuck, then mined after the pass gave up, is recognised and not sent twice.
        closed_epoch(session, EPOCH + 4)
        _rpc(process.rpc_url, "evm_setAutomine", [False])
        with pytest.raises(ChainError):
            anchor_pass(session, chain)
        _rpc(process.rpc_url, "evm_mine", [])
        _rpc(process.rpc_url, "evm_setAutomine", [True])
        stuck = chain.publication(EPOCH + 4)
        assert stuck is not None
        (recognised,) = anchor_pass(session, chain).anchored
        assert (recognised.epoch, recognised.tx_hash) == (EPOCH + 4, stuck.tx_hash)
        assert check_anchors(session, chain) == []
    finally:
        _stopped(process)


def test_gas_caps_bound_the_fee_and_a_base_fee_above_them_delays_anchoring(session: Session, anvil_dir: Path) -> None:
    process, _ = embedded_chain(anvil_dir)
    try:
        closed_epoch(session, EPOCH)
        record = json.loads((anvil_dir / "contracts.json").read_text())
        too_low = PayoutChain.connect(process.rpc_url, record["distributor"], gas=GasCaps(max_fee_per_gas_wei=1))
        with pytest.raises(ChainError, match="above --chain-max-fee-gwei"):
            anchor_pass(session, too_low)
        assert too_low.epoch_root(EPOCH) is None
        caps = GasCaps(max_fee_per_gas_wei=50 * 10**9, max_priority_fee_per_gas_wei=10**8)
        capped = PayoutChain.connect(process.rpc_url, record["distributor"], gas=caps)
        (anchor,) = anchor_pass(session, capped).anchored
        sent = _rpc(process.rpc_url, "eth_getTransactionByHash", [anchor.tx_hash])
        assert isinstance(sent, dict)
        assert int(sent["maxFeePerGas"], 16) <= caps.max_fee_per_gas_wei
        assert int(sent["maxPriorityFeePerGas"], 16) <= 10**8
    finally:
        _stopped(process)


ANVIL_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"  # anvil's first dev account


def test_a_real_network_setup_anchors_with_a_keystore_key_and_refuses_the_wrong_chain(
        session: Session, anvil_dir: Path, tmp_path: Path) -> None:
    """Anvil stands in for a real network: the contracts deployed, the coordinator given only the
    RPC URL, chain id, distributor and a keystore file."""
    process, _ = embedded_chain(anvil_dir)
    try:
        closed_epoch(session, EPOCH)
        distributor = json.loads((anvil_dir / "contracts.json").read_text())["distributor"]
        keystore = tmp_path / "publisher.json"
        keystore.write_text(json.dumps(Account.encrypt(ANVIL_KEY, "pw", kdf="pbkdf2", iterations=2)))
        flags = {"rpc_url": process.rpc_url, "distributor": distributor, "keystore": str(keystore),
                 "confirmations": "2"}
        settings = chain_settings(**flags, chain_id="31337")
        key = publisher_key(settings, {"MLXNET_PAYOUT_KEYSTORE_PASSWORD": "pw"})
        chains = PayoutChains(None, settings, key)
        chains.check_at_start()
        chain = chains.get()
        assert anchor_pass(session, chain, confirmations=settings.confirmations).waiting == [EPOCH]
        _rpc(process.rpc_url, "evm_mine", [])
        (anchor,) = anchor_pass(session, chain, confirmations=settings.confirmations).anchored
        sent = _rpc(process.rpc_url, "eth_getTransactionByHash", [anchor.tx_hash])
        assert isinstance(sent, dict) and sent["from"] == Account.from_key(ANVIL_KEY).address.lower()
        with pytest.raises(ChainSettingsError, match="serves chain 31337, not the configured --chain-id 8453"):
            PayoutChains(None, chain_settings(**flags, chain_id="8453"), key).check_at_start()
        elsewhere = {**flags, "distributor": "0x" + "12" * 20}
        with pytest.raises(ChainSettingsError, match="no payout distributor at"):
            PayoutChains(None, chain_settings(**elsewhere, chain_id="31337"), key).check_at_start()
    finally:
        _stopped(process)
    unreachable = PayoutChains(None, settings, key)
    unreachable.check_at_start()  # the RPC is down: start anyway, anchoring waits for it
    with pytest.raises(ChainError):
        unreachable.get()


_HOLD_ANVIL = """
import sys
from pathlib import Path
from ledger.anvil import embedded_chain
process, chain = embedded_chain(Path(sys.argv[1]))
chain.publish(7, b"\\x11" * 32, 5, b"\\x22" * 32)
print(process.process.pid, flush=True)
sys.stdin.read()
"""


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it exited while we looked
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _wait_exit(pid: int, timeout_s: float) -> bool:
    """Whether the process (not our child) exits within timeout_s: woken by its pidfd, no polling."""
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([descriptor], [], [], timeout_s)[0])
    finally:
        os.close(descriptor)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfd_open is Linux-only; the watchdog is not")
def test_anvil_dies_with_a_sigkilled_parent_and_keeps_its_state(anvil_dir: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", _HOLD_ANVIL, str(anvil_dir)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        watchdog = int(parent.stdout.readline())
        (anvil,) = _children(watchdog)
        program = Path(f"/proc/{anvil}/cmdline").read_bytes().split(b"\0")[0]
        assert Path(program.decode()).name == "anvil"  # the binary itself, not npm's node wrapper
    finally:
        parent.kill()  # SIGKILL: nothing in the parent gets to stop anvil
        parent.wait()
        for stream in (parent.stdin, parent.stdout):
            if stream is not None:
                stream.close()
    assert _wait_exit(anvil, 60) and _wait_exit(watchdog, 60), "anvil outlived the process that started it"
    process, chain = embedded_chain(anvil_dir)  # the state anvil dumped on its way out
    try:
        assert chain.epoch_root(7) == b"\x11" * 32
    finally:
        _stopped(process)
