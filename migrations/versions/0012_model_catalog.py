"""The model catalog: each model id bound to one set of weights and one spec
(coordinator/nodes/catalog.py), so the first node to register a model cannot poison it.

Revision ID: 0012_model_catalog
Revises: 0011_partial_receipts
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_model_catalog"
down_revision = "0011_partial_receipts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_catalog",
        sa.Column("model_id", sa.String(1024), primary_key=True),
        sa.Column("weights_digest", sa.String(64), nullable=False),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("bound_by", sa.String(128), nullable=False),
        sa.Column("bound_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("model_catalog")
