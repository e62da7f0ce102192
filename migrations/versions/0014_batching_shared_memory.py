"""Jobs of one model on one Mac batch and share its weights: each assignment records the part of its
reserved memory that such jobs share, so a Mac's commitment counts it once (coordinator.storage.job_rows);
and a node's benchmark keeps its decode speed at each batch size, which placement's speeds count;
and a job keeps how many prompt tokens its node reused from its prompt cache (usage's cached_tokens).

Revision ID: 0014_batching_shared_memory
Revises: 0013_peercheck_peer_checks
"""

import sqlalchemy as sa
from alembic import op

revision = "0014_batching_shared_memory"
down_revision = "0013_peercheck_peer_checks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job_assignments",
                  sa.Column("shared_memory_bytes", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("nodes", sa.Column("batch_decode_json", sa.Text, nullable=False, server_default="[]"))
    op.add_column("node_benchmarks", sa.Column("batch_decode_json", sa.Text, nullable=False, server_default="[]"))
    op.add_column("jobs", sa.Column("cached_prompt_tokens", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("jobs", "cached_prompt_tokens")
    op.drop_column("node_benchmarks", "batch_decode_json")
    op.drop_column("nodes", "batch_decode_json")
    op.drop_column("job_assignments", "shared_memory_bytes")
