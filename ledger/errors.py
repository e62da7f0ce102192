"""The ledger's few real failures; expected outcomes are ResultCode values, not exceptions.

    LedgerError
    ├── LedgerNotInstalledError   the ledger tables or the chain-head row are missing
    └── ChainError                the payout chain refused a call or could not be reached
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every exception the ledger raises on purpose."""


class LedgerNotInstalledError(LedgerError):
    """The ledger tables or the chain-head row are missing from the database."""


class ChainError(LedgerError):
    """The chain refused a call or could not be reached; the message says which and why."""
