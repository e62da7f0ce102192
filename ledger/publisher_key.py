"""The key that publishes roots on a real network: from an environment variable or an encrypted
keystore file (the Web3 Secret Storage format that geth, Foundry's `cast wallet` and
eth-account write). Read once at start-up; a missing or wrong key is refused naming the flag."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from eth_account import Account

from ledger.chain_settings import ChainSettings
from ledger.errors import ChainSettingsError

KEYSTORE_BYTES_MAX = 64 * 1024  # a keystore file is under 1 KB
_KEY = re.compile(r"(0x)?[0-9a-fA-F]{64}")


def publisher_key(settings: ChainSettings, environ: Mapping[str, str] = os.environ) -> str | None:
    """The publisher's private key (0x-hex), or None for the coordinator's own anvil."""
    if settings.embedded:
        return None
    if settings.keystore_path is not None:
        return _from_keystore(settings, environ)
    assert settings.key_env is not None
    key = environ.get(settings.key_env, "").strip()
    if not key:
        raise ChainSettingsError(f"the publisher's key is not set: put it (hex) in ${settings.key_env}, or "
                                 "give --chain-keystore FILE")
    if not _KEY.fullmatch(key):
        raise ChainSettingsError(f"${settings.key_env} must hold a private key: 64 hex digits, with or without 0x")
    return "0x" + key.removeprefix("0x").lower()


def _from_keystore(settings: ChainSettings, environ: Mapping[str, str]) -> str:
    path, password_env = settings.keystore_path, settings.keystore_password_env
    assert path is not None and password_env is not None
    try:
        if path.stat().st_size > KEYSTORE_BYTES_MAX:
            raise ChainSettingsError(f"--chain-keystore {path} is over {KEYSTORE_BYTES_MAX} bytes: not a keystore")
        keystore = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ChainSettingsError(f"--chain-keystore {path} cannot be read: {error.strerror}") from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ChainSettingsError(f"--chain-keystore {path} is not a JSON keystore file") from error
    password = environ.get(password_env)
    if password is None:
        raise ChainSettingsError(f"--chain-keystore needs its password in ${password_env} "
                                 "(or name another variable with --chain-keystore-password-env)")
    try:
        return "0x" + bytes(Account.decrypt(keystore, password)).hex()
    except (ValueError, KeyError, TypeError) as error:
        # eth-account says "MAC mismatch" for a wrong password; a malformed file fails on its fields.
        raise ChainSettingsError(f"--chain-keystore {path} cannot be decrypted with ${password_env}: "
                                 "a wrong password or not a keystore file") from error
