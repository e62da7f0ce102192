"""Planted checks: a check job whose claim the coordinator built to be wrong, so that a checker
answering "matches" without replaying is caught (coordinator/verification/planted.py).

Revision ID: 0018_peers2_planted_checks
Revises: 0017_beats_uptime_spans
"""

import sqlalchemy as sa
from alembic import op

revision = "0018_peers2_planted_checks"
down_revision = "0017_beats_uptime_spans"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The verified job whose prompt and output a planted check reuses, and the tampered receipt
    # it is judged against; both null for a real check.
    op.add_column("peer_checks", sa.Column("planted_from_job_id", sa.String(64), nullable=True))
    op.add_column("peer_checks", sa.Column("claim_body", sa.LargeBinary(), nullable=True))
    # A fee taken back when its checker was caught by a planted check: that check's id.
    op.add_column("peer_checks", sa.Column("fee_taken_back_by", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("peer_checks") as batch:  # SQLite drops columns by copying the table
        batch.drop_column("fee_taken_back_by")
        batch.drop_column("claim_body")
        batch.drop_column("planted_from_job_id")
