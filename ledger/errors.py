"""The ledger's few real failures; expected outcomes are ResultCode values, not exceptions.

    LedgerError
    ├── LedgerNotInstalledError   the ledger tables or the chain-head row are missing
    ├── ChainError                the payout chain refused a call or could not be reached
    └── ChainSettingsError        the chain's settings are wrong (a flag, a key, the chain id reported)
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every exception the ledger raises on purpose."""


class LedgerNotInstalledError(LedgerError):
    """The ledger tables or the chain-head row are missing from the database."""


class ChainError(LedgerError):
    """The chain refused a call or could not be reached; the message says which and why."""


class ChainSettingsError(LedgerError):
    """The payout chain's settings cannot work; the message names the flag and what it must be.

    Raised before the coordinator starts, and whenever the RPC reports another chain than the
    one configured, so a root is never published where nobody looks for it."""
