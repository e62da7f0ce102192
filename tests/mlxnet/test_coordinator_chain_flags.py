"""`mlxnet coordinator` refuses payout-chain settings that cannot work before it serves anything: bad
flags, a missing key, and (against a real anvil) an RPC serving another chain than --chain-id."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.api import connect_chain
from ledger.anvil import anvil_binary, embedded_chain
from mlxnet import cli

ANVIL_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"  # anvil's first dev account


def _coordinator(tmp_path: Path, *flags: str) -> int:
    return cli.main(["coordinator", "--insecure", "--port", "0", "--http-port", "0",
                     "--data-dir", str(tmp_path / "coordinator"), *flags])


@pytest.mark.parametrize(("flags", "needle"), [
    (("--chain-confirmations", "0"), "--chain-confirmations must be a whole number of blocks from 1 to 64"),
    (("--chain-max-fee-gwei", "-3"), "--chain-max-fee-gwei must be a number of gwei above 0"),
    (("--chain-id", "8453"), "--chain-id needs --chain-rpc-url"),
    (("--chain-rpc-url", "https://rpc.example", "--chain-distributor", "0x" + "ab" * 20),
     "--chain-id is required with --chain-rpc-url"),
    (("--chain-rpc-url", "https://rpc.example", "--chain-id", "8453", "--chain-distributor", "0x" + "ab" * 20),
     "the publisher's key is not set"),
])
def test_bad_chain_flags_stop_the_coordinator_before_it_starts(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
        flags: tuple[str, ...], needle: str) -> None:
    monkeypatch.delenv("MLXNET_PAYOUT_PUBLISHER_KEY", raising=False)
    assert _coordinator(tmp_path, *flags) == 2
    assert needle in caplog.text
    assert not (tmp_path / "coordinator" / "coordinator.db").exists()  # refused before the database


@pytest.fixture
def anvil(tmp_path: Path) -> Iterator[tuple[str, str]]:
    if anvil_binary() is None:
        pytest.fail("needs anvil: `make anvil` installs @foundry-rs/anvil into .tools/")
    process, chain = embedded_chain(tmp_path / "anvil")
    try:
        yield process.rpc_url, chain.distributor_address
    finally:
        process.stop()


def test_an_rpc_on_another_chain_is_refused_at_start_up(tmp_path: Path, anvil: tuple[str, str],
                                                        caplog: pytest.LogCaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    rpc_url, distributor = anvil
    monkeypatch.setenv("MLXNET_PAYOUT_PUBLISHER_KEY", ANVIL_KEY)
    assert _coordinator(tmp_path, "--chain-rpc-url", rpc_url, "--chain-id", "8453",
                        "--chain-distributor", distributor) == 2
    assert "serves chain 31337, not the configured --chain-id 8453" in caplog.text
    assert json.loads((tmp_path / "anvil" / "contracts.json").read_text())["distributor"] == distributor


def test_deploy_on_a_network_then_run_the_coordinator_on_it(tmp_path: Path, anvil: tuple[str, str],
                                                            capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`mlxnet ledger deploy` from a key (anvil standing in for a real network), refused on the wrong chain."""
    rpc_url, _ = anvil
    monkeypatch.setenv("DEPLOYER_KEY", ANVIL_KEY)
    assert cli.main(["ledger", "deploy", "--rpc-url", rpc_url, "--chain-id", "10", "--key-env", "DEPLOYER_KEY"]) == 2
    assert "serves chain 31337, not the --chain-id 10 given: nothing deployed" in capsys.readouterr().err
    assert cli.main(["ledger", "deploy", "--rpc-url", rpc_url, "--chain-id", "31337", "--key-env", "DEPLOYER_KEY"]) == 0
    printed = capsys.readouterr().out
    distributor = next(line.split()[1] for line in printed.splitlines() if line.startswith("distributor "))
    assert "publisher 0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266" in printed
    assert f"--chain-distributor {distributor} --chain-key-env DEPLOYER_KEY" in printed
    chain = connect_chain(rpc_url, distributor, ANVIL_KEY, chain_id=31337)  # refused if no code were there
    assert chain.epoch_root(1) is None
    assert chain.publish(1, b"\x01" * 32, 5, b"\x02" * 32).gas_used > 0  # the key's account publishes
