"""MLX World: operator keys and operator-declared regions.

Revision ID: 0006_world
Revises: 0005_ledger_epochs

operator_keys keeps only a sha256 of each key (mlxo_...); a key opens one
operator's page in MLX World. node_regions holds the region an operator
declared for each of their Macs. Both match coordinator.world.tables.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_world"
down_revision = "0005_ledger_epochs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "operator_keys",
        sa.Column("key_id", sa.String(32), primary_key=True),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("operator_id", sa.String(128), nullable=False),
        sa.Column("label", sa.String(128), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("revoked_at_ms", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_operator_keys_secret", "operator_keys", ["secret_sha256"], unique=True)
    op.create_index("ix_operator_keys_operator", "operator_keys", ["operator_id"])
    op.create_table(
        "node_regions",
        sa.Column("node_id", sa.String(64), primary_key=True),
        sa.Column("region", sa.String(64), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_node_regions_region", "node_regions", ["region"])


def downgrade() -> None:
    op.drop_index("ix_node_regions_region", "node_regions")
    op.drop_table("node_regions")
    op.drop_index("ix_operator_keys_operator", "operator_keys")
    op.drop_index("ix_operator_keys_secret", "operator_keys")
    op.drop_table("operator_keys")
