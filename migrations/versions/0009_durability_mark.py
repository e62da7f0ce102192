"""A one-row table that Database.make_durable writes: its durable commit makes every
commit before it durable too, so a submit can commit without waiting for the disk and
be made durable while the node starts, before the consumer hears of the job.

Revision ID: 0009_durability_mark
Revises: 0008_ledger_transfer_keys
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_durability_mark"
down_revision = "0008_ledger_transfer_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "durability_marks",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("mark", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(table, [{"id": 1, "mark": 0}])


def downgrade() -> None:
    op.drop_table("durability_marks")
