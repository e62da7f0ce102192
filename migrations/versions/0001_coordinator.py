"""Coordinator tables: nodes, jobs, job assignments and streamed tokens.

Revision ID: 0001_coordinator
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001_coordinator"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("node_id", sa.String(64), primary_key=True),
        sa.Column("public_key", sa.LargeBinary(32), nullable=False),
        sa.Column("operator_id", sa.String(128), nullable=False),
        sa.Column("display_name", sa.String(128), nullable=False),
        sa.Column("chip", sa.String(128), nullable=False),
        sa.Column("chip_tier", sa.String(16), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger, nullable=False),
        sa.Column("gpu_working_set_bytes", sa.BigInteger, nullable=False),
        sa.Column("memory_bandwidth_gb_s", sa.Float, nullable=False),
        sa.Column("os_name", sa.String(128), nullable=False),
        sa.Column("simulated", sa.Boolean, nullable=False),
        sa.Column("hardware_json", sa.Text, nullable=False),
        sa.Column("models_json", sa.Text, nullable=False),
        sa.Column("max_concurrent_jobs", sa.Integer, nullable=False),
        sa.Column("session_token_sha256", sa.String(64), nullable=False),
        sa.Column("registered_at_ms", sa.BigInteger, nullable=False),
        sa.Column("last_heartbeat_ms", sa.BigInteger, nullable=False),
        sa.Column("running_jobs_reported", sa.Integer, nullable=False),
    )
    op.create_index("ix_nodes_session", "nodes", ["session_token_sha256"], unique=True)
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("consumer_id", sa.String(128), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("model_id", sa.String(512), nullable=False),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("max_tokens", sa.Integer, nullable=False),
        sa.Column("temperature", sa.Float, nullable=False),
        sa.Column("top_p", sa.Float, nullable=False),
        sa.Column("seed", sa.BigInteger, nullable=False),
        sa.Column("min_decode_tokens_per_s", sa.Float, nullable=False),
        sa.Column("context_tokens", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("strategy", sa.String(16), nullable=True),
        sa.Column("layer_split_json", sa.Text, nullable=True),
        sa.Column("explanation_json", sa.Text, nullable=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("completion_tokens", sa.Integer, nullable=False),
        sa.Column("receipt_body", sa.LargeBinary, nullable=True),
        sa.Column("receipt_signature", sa.LargeBinary, nullable=True),
        sa.Column("receipt_verified", sa.Boolean, nullable=False),
        sa.Column("credited_base_units", sa.BigInteger, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("assigned_at_ms", sa.BigInteger, nullable=True),
        sa.Column("started_at_ms", sa.BigInteger, nullable=True),
        sa.Column("finished_at_ms", sa.BigInteger, nullable=True),
        sa.UniqueConstraint("consumer_id", "request_id", name="uq_jobs_consumer_request"),
    )
    op.create_index("ix_jobs_status_created", "jobs", ["status", "created_at_ms"])
    op.create_table(
        "job_assignments",
        sa.Column("job_id", sa.String(64), sa.ForeignKey("jobs.job_id"), primary_key=True),
        sa.Column("node_id", sa.String(64), sa.ForeignKey("nodes.node_id"), primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("reserved_memory_bytes", sa.BigInteger, nullable=False),
        sa.Column("layers", sa.Integer, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
    )
    op.create_index("ix_job_assignments_node_active", "job_assignments", ["node_id", "active"])
    op.create_table(
        "job_tokens",
        sa.Column("job_id", sa.String(64), sa.ForeignKey("jobs.job_id"), primary_key=True),
        sa.Column("first_index", sa.Integer, primary_key=True),
        sa.Column("token_ids_json", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_tokens")
    op.drop_index("ix_job_assignments_node_active", "job_assignments")
    op.drop_table("job_assignments")
    op.drop_index("ix_jobs_status_created", "jobs")
    op.drop_table("jobs")
    op.drop_index("ix_nodes_session", "nodes")
    op.drop_table("nodes")
