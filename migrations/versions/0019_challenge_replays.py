"""Challenge answers are replayed: each keeps its signed receipt and tokens until the
coordinator's verifier has replayed them, and a node records when a challenge last passed
its replay (only such a node earns the Ultra-seat bonus).

Revision ID: 0019_challenge_replays
Revises: 0018_peers2_planted_checks
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_challenge_replays"
down_revision = "0018_peers2_planted_checks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("node_challenges", sa.Column("receipt_body", sa.LargeBinary, nullable=True))
    op.add_column("node_challenges", sa.Column("receipt_signature", sa.LargeBinary, nullable=True))
    op.add_column("node_challenges", sa.Column("token_ids", sa.LargeBinary, nullable=True))
    op.add_column("nodes", sa.Column("challenge_passed_at_ms", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("challenge_passed_at_ms")
    with op.batch_alter_table("node_challenges") as batch:
        batch.drop_column("token_ids")
        batch.drop_column("receipt_signature")
        batch.drop_column("receipt_body")
