"""Check jobs run by peer nodes (coordinator/verification/peer_store.py): who checks which job,
the signed result, and the fee paid for it.

Revision ID: 0013_peercheck_peer_checks
Revises: 0012_model_catalog
"""

import sqlalchemy as sa
from alembic import op

revision = "0013_peercheck_peer_checks"
down_revision = "0012_model_catalog"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "peer_checks",
        sa.Column("check_id", sa.String(64), primary_key=True),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("checked_node_id", sa.String(64), nullable=False),
        sa.Column("checked_operator_id", sa.String(128), nullable=False),
        sa.Column("checker_node_id", sa.String(64), nullable=True),
        sa.Column("checker_operator_id", sa.String(128), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("assigned_at_ms", sa.BigInteger, nullable=True),
        sa.Column("deadline_ms", sa.BigInteger, nullable=True),
        sa.Column("answered_at_ms", sa.BigInteger, nullable=True),
        sa.Column("passed", sa.Boolean, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("evidence_json", sa.Text, nullable=True),
        sa.Column("result_body", sa.LargeBinary, nullable=True),
        sa.Column("result_signature", sa.LargeBinary, nullable=True),
        sa.Column("fee_base_units", sa.BigInteger, nullable=False),
        sa.Column("fee_transfer_id", sa.String(128), nullable=True),
    )
    op.create_index("ix_peer_checks_checker", "peer_checks", ["checker_node_id", "status"])
    op.create_index("ix_peer_checks_job", "peer_checks", ["job_id"])
    op.create_index("ix_peer_checks_status", "peer_checks", ["status", "deadline_ms"])
    op.create_index("ix_peer_checks_pairs", "peer_checks", ["assigned_at_ms"])


def downgrade() -> None:
    op.drop_table("peer_checks")
