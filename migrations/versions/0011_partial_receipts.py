"""Proof for work cut off by a fault: a job's latest partial receipt, and how its consumer
reads the output (a stream sees tokens as they come; a whole answer only at the end), so a
failed job charges only what was delivered and proven.

Revision ID: 0011_partial_receipts
Revises: 0010_ledger_head_signatures
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_partial_receipts"
down_revision = "0010_ledger_head_signatures"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("partial_receipt_body", sa.LargeBinary, nullable=True))
    op.add_column("jobs", sa.Column("partial_receipt_signature", sa.LargeBinary, nullable=True))
    op.add_column("jobs", sa.Column("delivery", sa.String(8), nullable=False, server_default="stream"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("delivery")
        batch.drop_column("partial_receipt_signature")
        batch.drop_column("partial_receipt_body")
