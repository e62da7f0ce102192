"""Node lending and proofs of presence: lending state and benchmark columns on nodes,
signed heartbeats, self-benchmarks and declared pods.

Revision ID: 0003_node_lending
Revises: 0002_ledger
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_node_lending"
down_revision = "0002_ledger"
branch_labels = None
depends_on = None


def _node_columns() -> tuple[sa.Column, ...]:
    return (
        sa.Column("lending_mode", sa.String(16), nullable=False, server_default="idle"),
        sa.Column("owner_active", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("accepting_jobs", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("lending_reason", sa.String(256), nullable=False, server_default=""),
        sa.Column("memory_cap_bytes", sa.BigInteger, nullable=True),
        sa.Column("warm_models_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("measured_bandwidth_gb_s", sa.Float, nullable=True),
        sa.Column("benchmark_flag", sa.Text, nullable=True),
        sa.Column("left_at_ms", sa.BigInteger, nullable=True),
    )


def upgrade() -> None:
    for column in _node_columns():
        op.add_column("nodes", column)
    op.create_table(
        "node_heartbeats",
        sa.Column("node_id", sa.String(64), sa.ForeignKey("nodes.node_id"), primary_key=True),
        sa.Column("sent_at_ms", sa.BigInteger, primary_key=True),
        sa.Column("received_at_ms", sa.BigInteger, nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("running_jobs", sa.Integer, nullable=False),
        sa.Column("owner_active", sa.Boolean, nullable=False),
        sa.Column("accepting_jobs", sa.Boolean, nullable=False),
        sa.Column("memory_cap_bytes", sa.BigInteger, nullable=False),
        sa.Column("signature", sa.LargeBinary(64), nullable=False),
    )
    op.create_index("ix_node_heartbeats_received", "node_heartbeats", ["node_id", "received_at_ms"])
    op.create_table(
        "node_benchmarks",
        sa.Column("node_id", sa.String(64), sa.ForeignKey("nodes.node_id"), primary_key=True),
        sa.Column("measured_at_ms", sa.BigInteger, primary_key=True),
        sa.Column("received_at_ms", sa.BigInteger, nullable=False),
        sa.Column("memory_bandwidth_gb_s", sa.Float, nullable=False),
        sa.Column("decode_tokens_per_s", sa.Float, nullable=False),
        sa.Column("prefill_tokens_per_s", sa.Float, nullable=False),
        sa.Column("reference_model", sa.String(256), nullable=False),
        sa.Column("reference_weights_bytes", sa.BigInteger, nullable=False),
        sa.Column("run_time_ms", sa.BigInteger, nullable=False),
        sa.Column("flag", sa.Text, nullable=True),
    )
    op.create_table(
        "pods",
        sa.Column("pod_id", sa.String(128), primary_key=True),
        sa.Column("leader_node_id", sa.String(64), sa.ForeignKey("nodes.node_id"), nullable=False),
        sa.Column("members_json", sa.Text, nullable=False),
        sa.Column("links_json", sa.Text, nullable=False),
        sa.Column("declared_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pods")
    op.drop_table("node_benchmarks")
    op.drop_index("ix_node_heartbeats_received", "node_heartbeats")
    op.drop_table("node_heartbeats")
    with op.batch_alter_table("nodes") as batch:
        for column in reversed(_node_columns()):
            batch.drop_column(column.name)
