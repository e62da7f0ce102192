"""Queued completions: a receipt writes its job's ledger posting into a queue in its own
transaction, and one writer posts many of them per chain-head lock (ledger/posting_queue.py).

Revision ID: 0020_jobcpu_queued_postings
Revises: 0019_challenge_replays
"""

import sqlalchemy as sa
from alembic import op

revision = "0020_jobcpu_queued_postings"
down_revision = "0019_challenge_replays"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_queued_postings",
        sa.Column("job_id", sa.String(128), primary_key=True),
        sa.Column("consumer_id", sa.String(128), nullable=True),
        sa.Column("operator_id", sa.String(128), nullable=False),
        sa.Column("consumer_charge", sa.BigInteger, nullable=False),
        sa.Column("operator_credit", sa.BigInteger, nullable=False),
        sa.Column("network_fee", sa.BigInteger, nullable=False),
        sa.Column("policy_version", sa.String(32), nullable=False),
        sa.Column("hold_s", sa.BigInteger, nullable=False),
        sa.Column("queued_at_us", sa.BigInteger, nullable=False),
        sa.Column("failed_code", sa.String(64), nullable=True),
    )
    op.create_index("ix_ledger_queued_postings_queued_at_us", "ledger_queued_postings", ["queued_at_us"])


def downgrade() -> None:
    op.drop_index("ix_ledger_queued_postings_queued_at_us", "ledger_queued_postings")
    op.drop_table("ledger_queued_postings")
