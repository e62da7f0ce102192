"""A node's stake is read on every receipt: its held credits, by node and credit state
(coordinator/verification/store.py node_exposure, economics.py).

Revision ID: 0016_peerpolicy_stake
Revises: 0015_strangers_checks
"""

from alembic import op

revision = "0016_peerpolicy_stake"
down_revision = "0015_strangers_checks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_job_checks_node_credit", "job_checks", ["node_id", "credit_state"])


def downgrade() -> None:
    op.drop_index("ix_job_checks_node_credit", table_name="job_checks")
