"""The ledger's tables, in its own MetaData so the coordinator's schema never mixes in.

Amounts and balances are BigInteger (signed int64): exact on SQLite and PostgreSQL,
up to ledger.units.AMOUNT_MAX base units (about 9.22 billion MLX). Times are integer
microseconds since the Unix epoch, so the hash chain never depends on a driver's
datetime handling. Transfers are insert-only; only account balances and the one-row
chain head are ever updated. migrations/versions/0002_ledger.py creates the same.
"""

from __future__ import annotations

from sqlalchemy import (
    DDL,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    event,
)

from ledger.chain import GENESIS_HASH
from ledger.model import ID_LENGTH_MAX, POLICY_VERSION_LENGTH_MAX

metadata = MetaData()

KIND_LENGTH_MAX = 32
STATE_LENGTH_MAX = 16
HASH_LENGTH = 64  # sha256, hex
CHAIN_HEAD_ROW_ID = 1

accounts = Table(
    "ledger_accounts",
    metadata,
    Column("id", String(ID_LENGTH_MAX), primary_key=True),
    Column("kind", String(KIND_LENGTH_MAX), nullable=False),
    Column("debits_must_not_exceed_credits", Boolean, nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    Column("debits_pending", BigInteger, nullable=False),
    Column("debits_posted", BigInteger, nullable=False),
    Column("credits_pending", BigInteger, nullable=False),
    Column("credits_posted", BigInteger, nullable=False),
    CheckConstraint(
        "debits_pending >= 0 AND debits_posted >= 0 AND credits_pending >= 0 AND credits_posted >= 0",
        name="ck_ledger_accounts_balances_non_negative",
    ),
    # The no-overdraft rule again in the database, in case a bug ever slips past the rules.
    CheckConstraint(
        "NOT debits_must_not_exceed_credits OR debits_pending + debits_posted <= credits_posted",
        name="ck_ledger_accounts_no_overdraft",
    ),
)

transfers = Table(
    "ledger_transfers",
    metadata,
    Column("id", String(ID_LENGTH_MAX), primary_key=True),
    Column("sequence", BigInteger, nullable=False, unique=True),
    # No foreign keys here: the rules check accounts and pending ids under the write lock and
    # the audit names any transfer that points nowhere (migrations/versions/0008_ledger_transfer_keys.py).
    Column("debit_account", String(ID_LENGTH_MAX), nullable=False),
    Column("credit_account", String(ID_LENGTH_MAX), nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("state", String(STATE_LENGTH_MAX), nullable=False),
    # Unique: a pending transfer is resolved by at most one post, void or expiry.
    Column("pending_id", String(ID_LENGTH_MAX), nullable=True, unique=True),
    Column("timeout_s", BigInteger, nullable=False),
    Column("job_id", String(ID_LENGTH_MAX), nullable=True),
    Column("kind", String(KIND_LENGTH_MAX), nullable=False),
    Column("policy_version", String(POLICY_VERSION_LENGTH_MAX), nullable=True),
    Column("created_at_us", BigInteger, nullable=False),
    Column("prev_hash", String(HASH_LENGTH), nullable=False),
    Column("hash", String(HASH_LENGTH), nullable=False),
    CheckConstraint("amount > 0", name="ck_ledger_transfers_amount_positive"),
    CheckConstraint("debit_account <> credit_account", name="ck_ledger_transfers_accounts_differ"),
    CheckConstraint(
        "state IN ('pending', 'posted', 'voided', 'expired')", name="ck_ledger_transfers_state"
    ),
    CheckConstraint(
        "(state = 'pending' AND pending_id IS NULL)"
        " OR (state = 'posted')"
        " OR (state IN ('voided', 'expired') AND pending_id IS NOT NULL)",
        name="ck_ledger_transfers_pending_id",
    ),
    CheckConstraint(
        "timeout_s >= 0 AND (state = 'pending' OR timeout_s = 0)", name="ck_ledger_transfers_timeout"
    ),
    Index("ix_ledger_transfers_job_id", "job_id"),
)

chain_head = Table(
    "ledger_chain_head",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("last_sequence", BigInteger, nullable=False),
    Column("last_transfer_id", String(ID_LENGTH_MAX), nullable=True),
    Column("last_hash", String(HASH_LENGTH), nullable=False),
    CheckConstraint(f"id = {CHAIN_HEAD_ROW_ID}", name="ck_ledger_chain_head_single_row"),
)

# The chain head is one row that always exists; every writer locks it first.
event.listen(
    chain_head,
    "after_create",
    DDL(
        f"INSERT INTO ledger_chain_head (id, last_sequence, last_transfer_id, last_hash)"
        f" VALUES ({CHAIN_HEAD_ROW_ID}, 0, NULL, '{GENESIS_HASH}')"
    ),
)

# --- epochs and payouts (migrations/versions/0005_ledger_epochs.py) ---------------------

ADDRESS_LENGTH = 42  # 0x + 40 hex digits
ROOT_LENGTH = 66  # 0x + 64 hex digits
REASON_LENGTH_MAX = 256

# An epoch closes at cutoff_us; its transfers are those created in (previous cutoff, cutoff].
epochs = Table(
    "ledger_epochs",
    metadata,
    Column("number", BigInteger, primary_key=True, autoincrement=False),
    Column("length_s", Integer, nullable=False),
    Column("cutoff_us", BigInteger, nullable=False, unique=True),
    Column("policy_version", String(POLICY_VERSION_LENGTH_MAX), nullable=False),
    Column("root", String(ROOT_LENGTH), nullable=True),  # None: nobody was paid this epoch
    Column("total", BigInteger, nullable=False),
    Column("leaf_count", Integer, nullable=False),
    Column("last_sequence", BigInteger, nullable=False),  # the journal's head when it closed
    Column("last_hash", String(HASH_LENGTH), nullable=False),
    CheckConstraint("total >= 0 AND leaf_count >= 0 AND length_s > 0", name="ck_ledger_epochs_counts"),
)

epoch_payouts = Table(
    "ledger_epoch_payouts",
    metadata,
    Column("epoch", BigInteger, ForeignKey("ledger_epochs.number"), primary_key=True),
    Column("operator_id", String(ID_LENGTH_MAX), primary_key=True),
    Column("address", String(ADDRESS_LENGTH), nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("transfer_id", String(ID_LENGTH_MAX), ForeignKey("ledger_transfers.id"), nullable=False, unique=True),
    CheckConstraint("amount > 0", name="ck_ledger_epoch_payouts_amount_positive"),
)

seat_epochs = Table(
    "ledger_seat_epochs",
    metadata,
    Column("epoch", BigInteger, ForeignKey("ledger_epochs.number"), primary_key=True),
    Column("node_id", String(ID_LENGTH_MAX), primary_key=True),
    Column("operator_id", String(ID_LENGTH_MAX), nullable=False),
    Column("availability_bps", Integer, nullable=False),
    Column("qualified", Boolean, nullable=False),
    Column("reason", String(REASON_LENGTH_MAX), nullable=False),
    Column("availability_reward", BigInteger, nullable=False),
    Column("job_bonus", BigInteger, nullable=False),
    Column("bonus_job_count", Integer, nullable=False),
)

payout_addresses = Table(
    "ledger_payout_addresses",
    metadata,
    Column("operator_id", String(ID_LENGTH_MAX), primary_key=True),
    Column("address", String(ADDRESS_LENGTH), nullable=False),
    Column("updated_at_us", BigInteger, nullable=False),
)

epoch_anchors = Table(
    "ledger_epoch_anchors",
    metadata,
    Column("epoch", BigInteger, ForeignKey("ledger_epochs.number"), primary_key=True),
    Column("chain_id", BigInteger, primary_key=True),
    Column("distributor", String(ADDRESS_LENGTH), primary_key=True),
    Column("root", String(ROOT_LENGTH), nullable=False),
    Column("tx_hash", String(ROOT_LENGTH), nullable=False),
    Column("block_number", BigInteger, nullable=False),
    Column("gas_used", BigInteger, nullable=False),
    Column("anchored_at_us", BigInteger, nullable=False),
)

# --- signed journal heads (migrations/versions/0010_ledger_head_signatures.py) ------------

PUBLIC_KEY_HEX_LENGTH = 64  # Ed25519, 32 bytes
SIGNATURE_HEX_LENGTH = 128  # Ed25519, 64 bytes

# The coordinator's signature over each closed epoch's record (ledger.head_signatures):
# its head, root and total. The audit checks it against a key kept outside this database.
head_signatures = Table(
    "ledger_head_signatures",
    metadata,
    Column("epoch", BigInteger, ForeignKey("ledger_epochs.number"), primary_key=True),
    Column("public_key", String(PUBLIC_KEY_HEX_LENGTH), nullable=False),
    Column("signature", String(SIGNATURE_HEX_LENGTH), nullable=False),
    Column("signed_at_us", BigInteger, nullable=False),
)

# --- queued completions (migrations/versions/0020_jobcpu_queued_postings.py) ---------------

QUEUE_CODE_LENGTH_MAX = 64

# A job's completion, written in its receipt's own transaction and posted later by one writer
# in a group commit (ledger.posting_queue): the receipt takes no ledger lock. One row a job;
# the row goes in the transaction that posts its chain, so it is posted exactly once.
queued_postings = Table(
    "ledger_queued_postings",
    metadata,
    Column("job_id", String(ID_LENGTH_MAX), primary_key=True),
    Column("consumer_id", String(ID_LENGTH_MAX), nullable=True),  # None: the network pays
    Column("operator_id", String(ID_LENGTH_MAX), nullable=False),
    Column("consumer_charge", BigInteger, nullable=False),
    Column("operator_credit", BigInteger, nullable=False),
    Column("network_fee", BigInteger, nullable=False),
    Column("policy_version", String(POLICY_VERSION_LENGTH_MAX), nullable=False),
    Column("hold_s", BigInteger, nullable=False),
    Column("queued_at_us", BigInteger, nullable=False),
    Column("failed_code", String(QUEUE_CODE_LENGTH_MAX), nullable=True),  # the ledger refused it: the audit names it
    Index("ix_ledger_queued_postings_queued_at_us", "queued_at_us"),
)
