"""Answered peer checks, newest first, from an index: a planted check's sources are the latest
checks a peer passed, read beside every check (coordinator.verification.peer_store.planting_sources).

Revision ID: 0021_plant_answered_index
Revises: 0020_jobcpu_queued_postings
"""

from alembic import op

revision = "0021_plant_answered_index"
down_revision = "0020_jobcpu_queued_postings"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_peer_checks_answered", "peer_checks", ["status", "answered_at_ms", "check_id"])


def downgrade() -> None:
    op.drop_index("ix_peer_checks_answered", "peer_checks")
