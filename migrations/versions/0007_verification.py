"""Verification: a check record per completed job (with its evidence) and each node's trust.

Revision ID: 0007_verification
Revises: 0006_world
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_verification"
down_revision = "0006_world"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_checks",
        sa.Column("job_id", sa.String(64), sa.ForeignKey("jobs.job_id"), primary_key=True),
        sa.Column("node_id", sa.String(64), sa.ForeignKey("nodes.node_id"), nullable=False),
        sa.Column("operator_id", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("check_rate", sa.Float, nullable=False),
        sa.Column("sampled", sa.Boolean, nullable=False),
        sa.Column("operator_credit", sa.BigInteger, nullable=False),
        sa.Column("credit_state", sa.String(16), nullable=False),
        sa.Column("hold_until_ms", sa.BigInteger, nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("evidence_json", sa.Text, nullable=True),
        sa.Column("verifier", sa.String(128), nullable=True),
        sa.Column("verifier_attempts", sa.Integer, nullable=False),
        sa.Column("completed_at_ms", sa.BigInteger, nullable=False),
        sa.Column("checked_at_ms", sa.BigInteger, nullable=True),
        sa.Column("credit_resolved_at_ms", sa.BigInteger, nullable=True),
        sa.Column("rerun_job_id", sa.String(64), nullable=True),
    )
    op.create_index("ix_job_checks_status", "job_checks", ["status", "completed_at_ms"])
    op.create_index("ix_job_checks_credit", "job_checks", ["credit_state", "hold_until_ms"])
    op.create_index("ix_job_checks_node", "job_checks", ["node_id", "completed_at_ms"])
    op.create_index("ix_job_checks_rerun", "job_checks", ["rerun_job_id"])
    op.create_table(
        "node_trust",
        sa.Column("node_id", sa.String(64), sa.ForeignKey("nodes.node_id"), primary_key=True),
        sa.Column("checks_passed", sa.Integer, nullable=False),
        sa.Column("checks_failed", sa.Integer, nullable=False),
        sa.Column("passed_since_failure", sa.Integer, nullable=True),
        sa.Column("quarantined_at_ms", sa.BigInteger, nullable=True),
        sa.Column("quarantine_reason", sa.Text, nullable=True),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("node_trust")
    op.drop_index("ix_job_checks_rerun", "job_checks")
    op.drop_index("ix_job_checks_node", "job_checks")
    op.drop_index("ix_job_checks_credit", "job_checks")
    op.drop_index("ix_job_checks_status", "job_checks")
    op.drop_table("job_checks")
