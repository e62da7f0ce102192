"""Signed heartbeats aggregated into uptime spans (coordinator/nodes/uptime.py), and the indexes
the incremental reaper reads by.

Revision ID: 0017_beats_uptime_spans
Revises: 0016_peerpolicy_stake
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_beats_uptime_spans"
down_revision = "0016_peerpolicy_stake"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_uptime_spans",
        sa.Column("node_id", sa.String(64), sa.ForeignKey("nodes.node_id"), primary_key=True),
        sa.Column("first_received_ms", sa.BigInteger, primary_key=True),
        sa.Column("last_received_ms", sa.BigInteger, nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("first_sent_at_ms", sa.BigInteger, nullable=False),
        sa.Column("last_sent_at_ms", sa.BigInteger, nullable=False),
        sa.Column("beats", sa.Integer, nullable=False),
        sa.Column("first_signature", sa.LargeBinary(64), nullable=False),
        sa.Column("last_signature", sa.LargeBinary(64), nullable=False),
    )
    op.create_index("ix_node_uptime_spans_last", "node_uptime_spans", ["node_id", "last_received_ms"])
    op.create_index("ix_job_assignments_active_node", "job_assignments", ["active", "node_id"])
    op.create_index("ix_nodes_left_heartbeat", "nodes", ["left_at_ms", "last_heartbeat_ms"])


def downgrade() -> None:
    op.drop_index("ix_nodes_left_heartbeat", "nodes")
    op.drop_index("ix_job_assignments_active_node", "job_assignments")
    op.drop_index("ix_node_uptime_spans_last", "node_uptime_spans")
    op.drop_table("node_uptime_spans")
