"""Consumer API: API keys, and the job fields the OpenAI-compatible gateway needs.

Revision ID: 0004_api_keys
Revises: 0003_node_lending

api_keys stores only a sha256 of each key. Jobs gain the key that paid for them and
its reservation, the prompt's format (plain text or canonical chat messages), stop
sequences, the logprobs asked for and a machine-readable error code; streamed
token chunks gain their logprobs.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_api_keys"
down_revision = "0003_node_lending"
branch_labels = None
depends_on = None


def _job_columns() -> tuple[sa.Column, ...]:
    return (
        sa.Column("api_key_id", sa.String(32), nullable=True),
        sa.Column("reserved_base_units", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("billing_closed_at_ms", sa.BigInteger, nullable=True),
        sa.Column("prompt_format", sa.String(16), nullable=False, server_default="text"),
        sa.Column("stop_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("top_logprobs", sa.Integer, nullable=False, server_default="-1"),
        sa.Column("error_code", sa.String(32), nullable=True),
    )


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(32), primary_key=True),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("consumer_id", sa.String(128), nullable=False),
        sa.Column("label", sa.String(128), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("revoked_at_ms", sa.BigInteger, nullable=True),
        sa.Column("spend_limit_base_units", sa.BigInteger, nullable=True),
        sa.Column("requests_per_minute_max", sa.Integer, nullable=True),
        sa.Column("concurrent_jobs_max", sa.Integer, nullable=True),
        sa.Column("spent_base_units", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_api_keys_secret", "api_keys", ["secret_sha256"], unique=True)
    op.create_index("ix_api_keys_consumer", "api_keys", ["consumer_id"])
    for column in _job_columns():
        op.add_column("jobs", column)
    op.create_index("ix_jobs_api_key_created", "jobs", ["api_key_id", "created_at_ms"])
    op.create_index("ix_jobs_api_key_status", "jobs", ["api_key_id", "status"])
    op.create_index("ix_jobs_billing_open", "jobs", ["billing_closed_at_ms", "reserved_base_units"])
    op.add_column("job_tokens", sa.Column("logprobs_json", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_tokens") as batch:
        batch.drop_column("logprobs_json")
    op.drop_index("ix_jobs_billing_open", "jobs")
    op.drop_index("ix_jobs_api_key_status", "jobs")
    op.drop_index("ix_jobs_api_key_created", "jobs")
    with op.batch_alter_table("jobs") as batch:
        for column in reversed(_job_columns()):
            batch.drop_column(column.name)
    op.drop_index("ix_api_keys_consumer", "api_keys")
    op.drop_index("ix_api_keys_secret", "api_keys")
    op.drop_table("api_keys")
