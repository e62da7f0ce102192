"""Ledger epochs: closed epochs with their payout root, payouts, Ultra-seat results,
operators' payout addresses and on-chain anchors.

Revision ID: 0005_ledger_epochs
Revises: 0004_api_keys

Written out in full, like 0002_ledger; tests/ledger checks 0002 + 0005 match ledger.storage.tables.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_ledger_epochs"
down_revision = "0004_api_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_epochs",
        sa.Column("number", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("length_s", sa.Integer, nullable=False),
        sa.Column("cutoff_us", sa.BigInteger, nullable=False, unique=True),
        sa.Column("policy_version", sa.String(32), nullable=False),
        sa.Column("root", sa.String(66), nullable=True),
        sa.Column("total", sa.BigInteger, nullable=False),
        sa.Column("leaf_count", sa.Integer, nullable=False),
        sa.Column("last_sequence", sa.BigInteger, nullable=False),
        sa.Column("last_hash", sa.String(64), nullable=False),
        sa.CheckConstraint("total >= 0 AND leaf_count >= 0 AND length_s > 0", name="ck_ledger_epochs_counts"),
    )
    op.create_table(
        "ledger_epoch_payouts",
        sa.Column("epoch", sa.BigInteger, sa.ForeignKey("ledger_epochs.number"), primary_key=True),
        sa.Column("operator_id", sa.String(128), primary_key=True),
        sa.Column("address", sa.String(42), nullable=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("transfer_id", sa.String(128), sa.ForeignKey("ledger_transfers.id"), nullable=False, unique=True),
        sa.CheckConstraint("amount > 0", name="ck_ledger_epoch_payouts_amount_positive"),
    )
    op.create_table(
        "ledger_seat_epochs",
        sa.Column("epoch", sa.BigInteger, sa.ForeignKey("ledger_epochs.number"), primary_key=True),
        sa.Column("node_id", sa.String(128), primary_key=True),
        sa.Column("operator_id", sa.String(128), nullable=False),
        sa.Column("availability_bps", sa.Integer, nullable=False),
        sa.Column("qualified", sa.Boolean, nullable=False),
        sa.Column("reason", sa.String(256), nullable=False),
        sa.Column("availability_reward", sa.BigInteger, nullable=False),
        sa.Column("job_bonus", sa.BigInteger, nullable=False),
        sa.Column("bonus_job_count", sa.Integer, nullable=False),
    )
    op.create_table(
        "ledger_payout_addresses",
        sa.Column("operator_id", sa.String(128), primary_key=True),
        sa.Column("address", sa.String(42), nullable=False),
        sa.Column("updated_at_us", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "ledger_epoch_anchors",
        sa.Column("epoch", sa.BigInteger, sa.ForeignKey("ledger_epochs.number"), primary_key=True),
        sa.Column("chain_id", sa.BigInteger, primary_key=True),
        sa.Column("distributor", sa.String(42), primary_key=True),
        sa.Column("root", sa.String(66), nullable=False),
        sa.Column("tx_hash", sa.String(66), nullable=False),
        sa.Column("block_number", sa.BigInteger, nullable=False),
        sa.Column("gas_used", sa.BigInteger, nullable=False),
        sa.Column("anchored_at_us", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "ledger_epoch_anchors", "ledger_payout_addresses", "ledger_seat_epochs", "ledger_epoch_payouts",
        "ledger_epochs",
    ):
        op.drop_table(table)
