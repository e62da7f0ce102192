"""Ledger tables: accounts with balances, hash-chained transfers, and the one-row chain head.

Revision ID: 0002_ledger
Revises: 0001_coordinator

Written out in full rather than imported from ledger.storage.tables, so this revision keeps
describing what it created after the ledger's tables evolve. tests/ledger checks that
it matches ledger.storage.tables.metadata today.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_ledger"
down_revision = "0001_coordinator"
branch_labels = None
depends_on = None

GENESIS_HASH = "0" * 64


def upgrade() -> None:
    op.create_table(
        "ledger_accounts",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("debits_must_not_exceed_credits", sa.Boolean, nullable=False),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
        sa.Column("debits_pending", sa.BigInteger, nullable=False),
        sa.Column("debits_posted", sa.BigInteger, nullable=False),
        sa.Column("credits_pending", sa.BigInteger, nullable=False),
        sa.Column("credits_posted", sa.BigInteger, nullable=False),
        sa.CheckConstraint(
            "debits_pending >= 0 AND debits_posted >= 0 AND credits_pending >= 0 AND credits_posted >= 0",
            name="ck_ledger_accounts_balances_non_negative",
        ),
        sa.CheckConstraint(
            "NOT debits_must_not_exceed_credits OR debits_pending + debits_posted <= credits_posted",
            name="ck_ledger_accounts_no_overdraft",
        ),
    )
    op.create_table(
        "ledger_transfers",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("sequence", sa.BigInteger, nullable=False, unique=True),
        sa.Column("debit_account", sa.String(128), sa.ForeignKey("ledger_accounts.id"), nullable=False),
        sa.Column("credit_account", sa.String(128), sa.ForeignKey("ledger_accounts.id"), nullable=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column(
            "pending_id", sa.String(128), sa.ForeignKey("ledger_transfers.id"), nullable=True, unique=True
        ),
        sa.Column("timeout_s", sa.BigInteger, nullable=False),
        sa.Column("job_id", sa.String(128), nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("policy_version", sa.String(32), nullable=True),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.CheckConstraint("amount > 0", name="ck_ledger_transfers_amount_positive"),
        sa.CheckConstraint("debit_account <> credit_account", name="ck_ledger_transfers_accounts_differ"),
        sa.CheckConstraint(
            "state IN ('pending', 'posted', 'voided', 'expired')", name="ck_ledger_transfers_state"
        ),
        sa.CheckConstraint(
            "(state = 'pending' AND pending_id IS NULL)"
            " OR (state = 'posted')"
            " OR (state IN ('voided', 'expired') AND pending_id IS NOT NULL)",
            name="ck_ledger_transfers_pending_id",
        ),
        sa.CheckConstraint(
            "timeout_s >= 0 AND (state = 'pending' OR timeout_s = 0)", name="ck_ledger_transfers_timeout"
        ),
    )
    op.create_index("ix_ledger_transfers_job_id", "ledger_transfers", ["job_id"])
    chain_head = op.create_table(
        "ledger_chain_head",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("last_sequence", sa.BigInteger, nullable=False),
        sa.Column("last_transfer_id", sa.String(128), nullable=True),
        sa.Column("last_hash", sa.String(64), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_ledger_chain_head_single_row"),
    )
    op.bulk_insert(
        chain_head, [{"id": 1, "last_sequence": 0, "last_transfer_id": None, "last_hash": GENESIS_HASH}]
    )


def downgrade() -> None:
    op.drop_table("ledger_chain_head")
    op.drop_index("ix_ledger_transfers_job_id", table_name="ledger_transfers")
    op.drop_table("ledger_transfers")
    op.drop_table("ledger_accounts")
