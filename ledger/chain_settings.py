"""Where and how roots are anchored: the payout chain's settings, checked before anything starts.

Pure: text from flags or the environment in, a frozen ChainSettings out, or a
ChainSettingsError naming the flag and what it must be. Two shapes are valid:
  - the coordinator's own anvil (no RPC URL): only confirmations and gas caps apply;
  - a real network: an http(s) RPC URL, the chain id it must report, the distributor's address
    and the publisher's key, from an environment variable or an encrypted keystore file
    (ledger.publisher_key loads it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from ledger.errors import ChainSettingsError

CONFIRMATIONS_MAX = 64  # an L2 finalises in a few blocks, L1 in 64 (two epochs of 32 slots)
CHAIN_ID_MAX = 2**53 - 1  # EIP-2294's ceiling, so wallets can show it
GAS_PRICE_GWEI_MAX = Decimal(100_000)  # a fee cap above this is a typo, not a budget
WEI_PER_GWEI = 10**9
RPC_URL_CHARS_MAX = 2_048
RECEIPT_TIMEOUT_S_DEFAULT = 120.0
PUBLISHER_KEY_ENV_DEFAULT = "MLXNET_PAYOUT_PUBLISHER_KEY"
KEYSTORE_PASSWORD_ENV_DEFAULT = "MLXNET_PAYOUT_KEYSTORE_PASSWORD"
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class GasCaps:
    """The most the publisher pays per gas (EIP-1559); None leaves it to the node's suggestion."""

    max_fee_per_gas_wei: int | None = None
    max_priority_fee_per_gas_wei: int | None = None

    def fees(self, base_fee_wei: int, suggested_priority_wei: int) -> tuple[int, int] | None:
        """(max fee, priority fee) to offer now, or None while the base fee alone is above the cap
        (anchoring then waits for cheaper blocks rather than overpay)."""
        priority = suggested_priority_wei
        if self.max_priority_fee_per_gas_wei is not None:
            priority = min(priority, self.max_priority_fee_per_gas_wei)
        max_fee = 2 * base_fee_wei + priority  # web3's own rule: room for the base fee to double
        if self.max_fee_per_gas_wei is not None:
            if base_fee_wei > self.max_fee_per_gas_wei:
                return None
            max_fee = min(max_fee, self.max_fee_per_gas_wei)
            priority = min(priority, max_fee)
        return max_fee, priority


@dataclass(frozen=True)
class ChainSettings:
    rpc_url: str | None = None  # None: the coordinator's own anvil in its data dir
    chain_id: int | None = None  # the id the RPC must report (a real network only)
    distributor: str | None = None
    confirmations: int = 1  # blocks on top of (and including) the anchor's before it counts
    gas: GasCaps = GasCaps()
    key_env: str | None = None  # the environment variable holding the publisher's key (hex)
    keystore_path: Path | None = None  # or an encrypted keystore file (eth-account's format)
    keystore_password_env: str | None = None
    receipt_timeout_s: float = RECEIPT_TIMEOUT_S_DEFAULT

    def __post_init__(self) -> None:
        assert 1 <= self.confirmations <= CONFIRMATIONS_MAX and self.receipt_timeout_s > 0
        assert (self.rpc_url is None) == (self.chain_id is None)
        assert self.distributor is None or self.rpc_url is not None  # none only to deploy (deploy_settings)

    @property
    def embedded(self) -> bool:
        return self.rpc_url is None


def parse_confirmations(text: str, field: str = "--chain-confirmations") -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= CONFIRMATIONS_MAX:
        raise ChainSettingsError(f"{field} must be a whole number of blocks from 1 to {CONFIRMATIONS_MAX}, "
                                 f"not {text[:40]!r}")
    return int(text)


def parse_gwei(text: str, field: str) -> int:
    """A gas price in gwei (decimals allowed: L2 fees are fractions of a gwei), as exact wei."""
    try:
        gwei = Decimal(text.strip())
    except InvalidOperation:
        gwei = Decimal("NaN")
    if not gwei.is_finite() or not 0 < gwei <= GAS_PRICE_GWEI_MAX:
        raise ChainSettingsError(f"{field} must be a number of gwei above 0 and at most {GAS_PRICE_GWEI_MAX}, "
                                 f"not {text[:40]!r}")
    wei = gwei * WEI_PER_GWEI
    if wei != wei.to_integral_value():
        raise ChainSettingsError(f"{field} is finer than 1 wei ({text[:40]!r} gwei): give at most 9 decimals")
    return int(wei)


def _chain_id(text: str | None) -> int:
    if text is None or not text.strip():
        raise ChainSettingsError("--chain-id is required with --chain-rpc-url: the id the network must report "
                                 "(e.g. 8453 for Base), so roots are never published on another chain")
    if not text.strip().isdigit() or not 1 <= int(text) <= CHAIN_ID_MAX:
        raise ChainSettingsError(f"--chain-id must be a whole number from 1 to {CHAIN_ID_MAX}, not {text[:40]!r}")
    return int(text)


def _rpc_url(text: str) -> str:
    url = text.strip()
    if len(url) > RPC_URL_CHARS_MAX or not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise ChainSettingsError(f"--chain-rpc-url must be an http:// or https:// URL of at most "
                                 f"{RPC_URL_CHARS_MAX} characters (the network's JSON-RPC endpoint)")
    return url


def _env_name(text: str, field: str) -> str:
    if not _ENV_NAME.fullmatch(text):
        raise ChainSettingsError(f"{field} must name an environment variable (letters, digits, _), "
                                 f"not {text[:40]!r}")
    return text


def chain_settings(*, rpc_url: str | None = None, chain_id: str | None = None, distributor: str | None = None,
                   confirmations: str | None = None, max_fee_gwei: str | None = None,
                   priority_fee_gwei: str | None = None, key_env: str | None = None,
                   keystore: str | None = None, keystore_password_env: str | None = None,
                   receipt_timeout_s: float = RECEIPT_TIMEOUT_S_DEFAULT) -> ChainSettings:
    """Settings from flag text (None: not given); raises ChainSettingsError naming the first bad flag."""
    count = 1 if confirmations is None else parse_confirmations(confirmations)
    gas = GasCaps(None if max_fee_gwei is None else parse_gwei(max_fee_gwei, "--chain-max-fee-gwei"),
                  None if priority_fee_gwei is None else parse_gwei(priority_fee_gwei, "--chain-priority-fee-gwei"))
    if (gas.max_fee_per_gas_wei is not None and gas.max_priority_fee_per_gas_wei is not None
            and gas.max_priority_fee_per_gas_wei > gas.max_fee_per_gas_wei):
        raise ChainSettingsError("--chain-priority-fee-gwei cannot exceed --chain-max-fee-gwei "
                                 "(the tip is part of the fee)")
    if not rpc_url:
        given = [flag for flag, value in (("--chain-id", chain_id), ("--chain-distributor", distributor),
                                          ("--chain-key-env", key_env), ("--chain-keystore", keystore))
                 if value]
        if given:
            raise ChainSettingsError(f"{given[0]} needs --chain-rpc-url: without one the coordinator runs its own "
                                     "anvil, deploys the contracts itself and publishes from anvil's account")
        return ChainSettings(confirmations=count, gas=gas, receipt_timeout_s=receipt_timeout_s)
    url, number = _rpc_url(rpc_url), _chain_id(chain_id)
    if not distributor or not _ADDRESS.fullmatch(distributor.strip()):
        raise ChainSettingsError("--chain-distributor must be the payout distributor's address, 0x and 40 hex "
                                 "digits (deployed once on that network)")
    key_env, keystore_path, password_env = _key_source(key_env, keystore, keystore_password_env)
    return ChainSettings(url, number, distributor.strip().lower(), count, gas, key_env=key_env,
                         keystore_path=keystore_path, keystore_password_env=password_env,
                         receipt_timeout_s=receipt_timeout_s)


def deploy_settings(*, rpc_url: str, chain_id: str | None, key_env: str | None = None, keystore: str | None = None,
                    keystore_password_env: str | None = None) -> ChainSettings:
    """A real network to deploy the contracts on (`mlxnet ledger deploy`): no distributor yet."""
    key_env, keystore_path, password_env = _key_source(key_env, keystore, keystore_password_env)
    return ChainSettings(_rpc_url(rpc_url), _chain_id(chain_id), key_env=key_env, keystore_path=keystore_path,
                         keystore_password_env=password_env)


def _key_source(key_env: str | None, keystore: str | None,
                keystore_password_env: str | None) -> tuple[str | None, Path | None, str | None]:
    """(the key's variable, or the keystore file and its password's variable)."""
    if key_env and keystore:
        raise ChainSettingsError("give the publisher's key one way: --chain-key-env or --chain-keystore, not both")
    if keystore:
        return None, Path(keystore).expanduser(), _env_name(keystore_password_env or KEYSTORE_PASSWORD_ENV_DEFAULT,
                                                            "--chain-keystore-password-env")
    return _env_name(key_env or PUBLISHER_KEY_ENV_DEFAULT, "--chain-key-env"), None, None
