"""The coordinator's Ed25519 signature over each closed epoch's journal head, root and total.

Written out in full, like 0002_ledger; tests/ledger checks the revisions match ledger.storage.tables.

Revision ID: 0010_ledger_head_signatures
Revises: 0009_durability_mark
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_ledger_head_signatures"
down_revision = "0009_durability_mark"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_head_signatures",
        sa.Column("epoch", sa.BigInteger, sa.ForeignKey("ledger_epochs.number"), primary_key=True),
        sa.Column("public_key", sa.String(64), nullable=False),
        sa.Column("signature", sa.String(128), nullable=False),
        sa.Column("signed_at_us", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ledger_head_signatures")
