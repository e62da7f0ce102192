"""Registration nonces in the shared database (any coordinator redeems one, once), and
challenge benchmarks sent to verified Macs at random times (coordinator/nodes/spot_benchmarks.py).

Revision ID: 0015_strangers_checks
Revises: 0014_batching_shared_memory
"""

import sqlalchemy as sa
from alembic import op

revision = "0015_strangers_checks"
down_revision = "0014_batching_shared_memory"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registration_nonces",
        sa.Column("nonce_sha256", sa.String(64), primary_key=True),
        sa.Column("public_key", sa.LargeBinary(32), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_registration_nonces_expires_at_ms", "registration_nonces", ["expires_at_ms"])
    op.create_table(
        "node_challenges",
        sa.Column("challenge_id", sa.String(64), primary_key=True),
        sa.Column("node_id", sa.String(64), sa.ForeignKey("nodes.node_id"), nullable=False),
        sa.Column("model_id", sa.String(1024), nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("seed", sa.BigInteger, nullable=False),
        sa.Column("decode_tokens", sa.Integer, nullable=False),
        sa.Column("claimed_tokens_per_s", sa.Float, nullable=False),
        sa.Column("issued_at_ms", sa.BigInteger, nullable=False),
        sa.Column("sent_at_ms", sa.BigInteger, nullable=True),
        sa.Column("answered_at_ms", sa.BigInteger, nullable=True),
        sa.Column("outcome", sa.Text, nullable=True),
    )
    op.create_index("ix_node_challenges_node_id", "node_challenges", ["node_id"])
    op.add_column("nodes", sa.Column("challenge_flag", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("challenge_flag")
    op.drop_index("ix_node_challenges_node_id", "node_challenges")
    op.drop_table("node_challenges")
    op.drop_index("ix_registration_nonces_expires_at_ms", "registration_nonces")
    op.drop_table("registration_nonces")
