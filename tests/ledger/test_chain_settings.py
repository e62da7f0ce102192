"""The payout chain's settings: what the coordinator's --chain-* flags accept, what they refuse and
why, the gas caps' arithmetic, and the publisher's key from an environment variable or a keystore."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from eth_account import Account
from hypothesis import given
from hypothesis import strategies as st

from ledger.chain_settings import (
    CONFIRMATIONS_MAX,
    GAS_PRICE_GWEI_MAX,
    WEI_PER_GWEI,
    ChainSettings,
    GasCaps,
    chain_settings,
    parse_gwei,
)
from ledger.errors import ChainSettingsError
from ledger.publisher_key import publisher_key

KEY = "0x" + "4c" * 32
DISTRIBUTOR = "0x" + "Ab" * 20
REAL = {"rpc_url": "https://mainnet.base.org", "chain_id": "8453", "distributor": DISTRIBUTOR}


def test_no_flags_mean_the_coordinators_own_anvil_with_one_confirmation() -> None:
    settings = chain_settings()
    assert settings.embedded and settings.confirmations == 1 and settings.gas == GasCaps()
    assert publisher_key(settings, {}) is None


def test_a_real_network_takes_its_url_chain_id_distributor_and_key_variable() -> None:
    settings = chain_settings(**REAL, confirmations="12", max_fee_gwei="0.05", priority_fee_gwei="0.001")
    assert (settings.rpc_url, settings.chain_id, settings.distributor) == (
        "https://mainnet.base.org", 8453, DISTRIBUTOR.lower())
    assert settings.confirmations == 12 and not settings.embedded
    assert settings.gas == GasCaps(50_000_000, 1_000_000)  # exact wei, no float on the way
    assert settings.key_env == "MLXNET_PAYOUT_PUBLISHER_KEY" and settings.keystore_path is None
    assert publisher_key(settings, {"MLXNET_PAYOUT_PUBLISHER_KEY": KEY.upper().replace("0X", "")}) == KEY


@pytest.mark.parametrize(("flags", "needle"), [
    ({"confirmations": "0"}, "--chain-confirmations must be a whole number of blocks from 1 to 64"),
    ({"confirmations": str(CONFIRMATIONS_MAX + 1)}, "--chain-confirmations"),
    ({"confirmations": "1.5"}, "--chain-confirmations"),
    ({"max_fee_gwei": "0"}, "--chain-max-fee-gwei must be a number of gwei above 0"),
    ({"max_fee_gwei": "nan"}, "--chain-max-fee-gwei"),
    ({"max_fee_gwei": "1e9"}, f"at most {GAS_PRICE_GWEI_MAX}"),
    ({"priority_fee_gwei": "0.0000000001"}, "finer than 1 wei"),
    ({"max_fee_gwei": "1", "priority_fee_gwei": "2"}, "cannot exceed --chain-max-fee-gwei"),
    ({"chain_id": "8453"}, "--chain-id needs --chain-rpc-url"),
    ({"keystore": "/k.json"}, "--chain-keystore needs --chain-rpc-url"),
    ({**REAL, "chain_id": None}, "--chain-id is required with --chain-rpc-url"),
    ({**REAL, "chain_id": "0"}, "--chain-id must be a whole number from 1"),
    ({**REAL, "chain_id": "-1"}, "--chain-id must be a whole number"),
    ({**REAL, "rpc_url": "ftp://node"}, "--chain-rpc-url must be an http:// or https:// URL"),
    ({**REAL, "rpc_url": "https://" + "a" * 3000}, "at most 2048 characters"),
    ({**REAL, "distributor": "0x12"}, "--chain-distributor must be the payout distributor's address"),
    ({**REAL, "distributor": None}, "--chain-distributor"),
    ({**REAL, "key_env": "K", "keystore": "/k.json"}, "not both"),
    ({**REAL, "key_env": "NOT A NAME"}, "--chain-key-env must name an environment variable"),
])
def test_bad_flags_are_refused_naming_the_flag(flags: dict[str, str | None], needle: str) -> None:
    with pytest.raises(ChainSettingsError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        chain_settings(**flags)


@pytest.mark.parametrize(("environ", "needle"), [
    ({}, r"the publisher's key is not set: put it \(hex\) in \$MLXNET_PAYOUT_PUBLISHER_KEY"),
    ({"MLXNET_PAYOUT_PUBLISHER_KEY": "  "}, "is not set"),
    ({"MLXNET_PAYOUT_PUBLISHER_KEY": "0x1234"}, "must hold a private key: 64 hex digits"),
])
def test_a_missing_or_malformed_key_is_refused(environ: dict[str, str], needle: str) -> None:
    with pytest.raises(ChainSettingsError, match=needle):
        publisher_key(chain_settings(**REAL), environ)


def _keystore(tmp_path: Path, password: str) -> Path:
    # pbkdf2 with few iterations keeps the test fast; real keystores use scrypt, read the same way.
    path = tmp_path / "publisher.json"
    path.write_text(json.dumps(Account.encrypt(KEY, password, kdf="pbkdf2", iterations=2)), encoding="utf-8")
    return path


def test_the_key_comes_from_an_encrypted_keystore_with_its_password_from_the_environment(tmp_path: Path) -> None:
    path = _keystore(tmp_path, "correct horse")
    settings = chain_settings(**REAL, keystore=str(path), keystore_password_env="PUBLISHER_PASSWORD")
    assert settings.key_env is None and settings.keystore_path == path
    assert publisher_key(settings, {"PUBLISHER_PASSWORD": "correct horse"}) == KEY
    with pytest.raises(ChainSettingsError, match="cannot be decrypted with \\$PUBLISHER_PASSWORD"):
        publisher_key(settings, {"PUBLISHER_PASSWORD": "wrong"})
    with pytest.raises(ChainSettingsError, match="needs its password in \\$PUBLISHER_PASSWORD"):
        publisher_key(settings, {})


@pytest.mark.parametrize(("content", "needle"), [
    (None, "cannot be read"),
    (b"\xff\xfe not json", "is not a JSON keystore file"),
    (b'{"version": 3}', "cannot be decrypted"),
])
def test_a_broken_keystore_file_is_refused(tmp_path: Path, content: bytes | None, needle: str) -> None:
    path = tmp_path / "keystore.json"
    if content is not None:
        path.write_bytes(content)
    settings = chain_settings(**REAL, keystore=str(path))
    with pytest.raises(ChainSettingsError, match=needle):
        publisher_key(settings, {"MLXNET_PAYOUT_KEYSTORE_PASSWORD": "pw"})


def test_settings_hold_no_key_so_printing_them_leaks_nothing(tmp_path: Path) -> None:
    settings = chain_settings(**REAL, keystore=str(_keystore(tmp_path, "pw")))
    assert KEY[2:] not in repr(settings) and KEY[2:] not in repr(ChainSettings())


@given(st.integers(1, int(GAS_PRICE_GWEI_MAX) * WEI_PER_GWEI))
def test_any_whole_wei_amount_written_in_gwei_reads_back_exactly(wei: int) -> None:
    assert parse_gwei(str(Decimal(wei) / WEI_PER_GWEI), "--chain-max-fee-gwei") == wei


@given(base=st.integers(0, 10**12), suggested=st.integers(0, 10**11),
       max_fee=st.none() | st.integers(1, 10**12), max_tip=st.none() | st.integers(1, 10**11))
def test_fees_stay_within_the_caps_and_wait_only_when_the_base_fee_is_above_them(
        base: int, suggested: int, max_fee: int | None, max_tip: int | None) -> None:
    fees = GasCaps(max_fee, max_tip).fees(base, suggested)
    if max_fee is not None and base > max_fee:
        assert fees is None
        return
    assert fees is not None
    fee, tip = fees
    assert base <= fee and tip <= fee  # includable now, and the tip is part of the fee
    assert max_fee is None or fee <= max_fee
    assert tip <= suggested and (max_tip is None or tip <= max_tip)
