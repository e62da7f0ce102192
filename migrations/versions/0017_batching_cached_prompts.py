"""A job keeps how many of its prompt tokens its node reused from its prompt cache (NodeService.
ReportPromptCache): the consumer's usage reports them as cached tokens.

Revision ID: 0017_batching_cached_prompts
Revises: 0016_peerpolicy_stake
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_batching_cached_prompts"
down_revision = "0016_peerpolicy_stake"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("cached_prompt_tokens", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("jobs", "cached_prompt_tokens")
