"""The coordinator's tables. Every node and job lives here, none only in memory.

Times are integer milliseconds since the epoch (`*_ms`), so SQLite and
PostgreSQL store them identically.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger, Boolean, Column, Float, ForeignKey, Index, Integer, LargeBinary, MetaData,
    String, Table, Text, UniqueConstraint, false, true,
)

metadata = MetaData()

nodes = Table(
    "nodes", metadata,
    Column("node_id", String(64), primary_key=True),
    Column("public_key", LargeBinary(32), nullable=False),
    Column("operator_id", String(128), nullable=False),
    Column("display_name", String(128), nullable=False),
    Column("chip", String(128), nullable=False),
    Column("chip_tier", String(16), nullable=False),
    Column("memory_bytes", BigInteger, nullable=False),
    Column("gpu_working_set_bytes", BigInteger, nullable=False),
    Column("memory_bandwidth_gb_s", Float, nullable=False),
    Column("os_name", String(128), nullable=False),
    Column("simulated", Boolean, nullable=False),
    Column("hardware_json", Text, nullable=False),  # the full HardwareReport
    Column("models_json", Text, nullable=False),  # ModelSpecs the node serves
    Column("max_concurrent_jobs", Integer, nullable=False),
    Column("session_token_sha256", String(64), nullable=False),
    Column("registered_at_ms", BigInteger, nullable=False),
    Column("last_heartbeat_ms", BigInteger, nullable=False),
    Column("running_jobs_reported", Integer, nullable=False, default=0),
    # The node's lending terms and self-benchmark, as of its last heartbeat (0003_node_lending).
    Column("lending_mode", String(16), nullable=False, server_default="idle"),  # idle/dedicated/ultra_seat
    Column("owner_active", Boolean, nullable=False, server_default=false()),
    Column("accepting_jobs", Boolean, nullable=False, server_default=true()),
    Column("lending_reason", String(256), nullable=False, server_default=""),
    Column("memory_cap_bytes", BigInteger, nullable=True),
    Column("warm_models_json", Text, nullable=False, server_default="[]"),
    Column("measured_bandwidth_gb_s", Float, nullable=True),
    Column("benchmark_flag", Text, nullable=True),  # why the benchmark does not fit the claimed chip
    # [[jobs in one batch, their tokens/s in all], ...] from that benchmark (0014_batching_shared_memory).
    Column("batch_decode_json", Text, nullable=False, server_default="[]"),
    Column("left_at_ms", BigInteger, nullable=True),  # set by Leave, cleared by Register
    # Why the latest challenge benchmark did not fit the claim; a passed one clears it, a fresh
    # self-benchmark does not (0015_strangers_checks).
    Column("challenge_flag", Text, nullable=True),
    # When a challenge last passed its replay; a failed one clears it. Only a node with one
    # earns the Ultra-seat bonus: timing alone proves nothing (0019_challenge_replays).
    Column("challenge_passed_at_ms", BigInteger, nullable=True),
)
Index("ix_nodes_session", nodes.c.session_token_sha256, unique=True)
# Expiring silent nodes reads the oldest leases first (0017_beats_uptime_spans).
Index("ix_nodes_left_heartbeat", nodes.c.left_at_ms, nodes.c.last_heartbeat_ms)

jobs = Table(
    "jobs", metadata,
    Column("job_id", String(64), primary_key=True),
    Column("consumer_id", String(128), nullable=False),
    Column("request_id", String(128), nullable=True),
    Column("model_id", String(512), nullable=False),
    Column("prompt", Text, nullable=False),
    Column("max_tokens", Integer, nullable=False),
    Column("temperature", Float, nullable=False),
    Column("top_p", Float, nullable=False),
    Column("seed", BigInteger, nullable=False),
    Column("min_decode_tokens_per_s", Float, nullable=False),
    Column("context_tokens", Integer, nullable=False),
    Column("status", String(16), nullable=False),  # queued/assigned/running/completed/failed
    Column("strategy", String(16), nullable=True),
    Column("layer_split_json", Text, nullable=True),
    Column("explanation_json", Text, nullable=True),
    Column("attempt", Integer, nullable=False, default=0),
    Column("prompt_tokens", Integer, nullable=False, default=0),
    # Of those, reused from the node's prompt cache (0014_batching_shared_memory): usage's cached_tokens.
    Column("cached_prompt_tokens", Integer, nullable=False, server_default="0", default=0),
    Column("completion_tokens", Integer, nullable=False, default=0),
    Column("receipt_body", LargeBinary, nullable=True),
    Column("receipt_signature", LargeBinary, nullable=True),
    Column("receipt_verified", Boolean, nullable=False, default=False),
    Column("credited_base_units", BigInteger, nullable=False, default=0),
    Column("error", Text, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("assigned_at_ms", BigInteger, nullable=True),
    Column("started_at_ms", BigInteger, nullable=True),
    Column("finished_at_ms", BigInteger, nullable=True),
    # The consumer API's fields (0004_api_keys).
    Column("api_key_id", String(32), nullable=True),  # the key that submitted the job, if any
    Column("reserved_base_units", BigInteger, nullable=False, server_default="0"),  # 0: none
    Column("billing_closed_at_ms", BigInteger, nullable=True),  # reservation resolved and counted
    Column("prompt_format", String(16), nullable=False, server_default="text"),  # text or chat
    Column("stop_json", Text, nullable=False, server_default="[]"),
    Column("top_logprobs", Integer, nullable=False, server_default="-1"),  # -1: no logprobs
    Column("error_code", String(32), nullable=True),  # e.g. prompt_too_long
    # Proof for work cut off by a fault (0011_partial_receipts): the node's latest partial
    # receipt, checked when the job ends, and whether its consumer reads a stream or a whole answer.
    Column("partial_receipt_body", LargeBinary, nullable=True),
    Column("partial_receipt_signature", LargeBinary, nullable=True),
    Column("delivery", String(8), nullable=False, server_default="stream"),
    UniqueConstraint("consumer_id", "request_id", name="uq_jobs_consumer_request"),
)
Index("ix_jobs_status_created", jobs.c.status, jobs.c.created_at_ms)
Index("ix_jobs_api_key_created", jobs.c.api_key_id, jobs.c.created_at_ms)
Index("ix_jobs_api_key_status", jobs.c.api_key_id, jobs.c.status)
Index("ix_jobs_billing_open", jobs.c.billing_closed_at_ms, jobs.c.reserved_base_units)

# Consumers' API keys; only a sha256 of each key is kept (0004_api_keys).
api_keys = Table(
    "api_keys", metadata,
    Column("key_id", String(32), primary_key=True),
    Column("secret_sha256", String(64), nullable=False),
    Column("consumer_id", String(128), nullable=False),
    Column("label", String(128), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("revoked_at_ms", BigInteger, nullable=True),
    Column("spend_limit_base_units", BigInteger, nullable=True),  # None: no limit
    Column("requests_per_minute_max", Integer, nullable=True),
    Column("concurrent_jobs_max", Integer, nullable=True),
    # Reservations of the key's open jobs plus the charges of its closed ones.
    Column("spent_base_units", BigInteger, nullable=False),
)
Index("ix_api_keys_secret", api_keys.c.secret_sha256, unique=True)
Index("ix_api_keys_consumer", api_keys.c.consumer_id)

# One row per node a job is placed on: one for a single Mac, several for a pod.
job_assignments = Table(
    "job_assignments", metadata,
    Column("job_id", String(64), ForeignKey("jobs.job_id"), primary_key=True),
    Column("node_id", String(64), ForeignKey("nodes.node_id"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("reserved_memory_bytes", BigInteger, nullable=False),
    Column("layers", Integer, nullable=False),
    Column("active", Boolean, nullable=False),  # false once the job ends or is handed back
    # Of reserved_memory_bytes, what the Mac's running jobs of the same model share (weights and
    # runtime): counted once per model and Mac (0014_batching_shared_memory). 0 on a pod.
    Column("shared_memory_bytes", BigInteger, nullable=False, server_default="0"),
)
Index("ix_job_assignments_node_active", job_assignments.c.node_id, job_assignments.c.active)
# The reaper's sweep for nodes nobody hears from that still hold work (0017_beats_uptime_spans).
Index("ix_job_assignments_active_node", job_assignments.c.active, job_assignments.c.node_id)

# Streamed tokens; the (job, first_index) key makes a re-sent chunk a no-op.
job_tokens = Table(
    "job_tokens", metadata,
    Column("job_id", String(64), ForeignKey("jobs.job_id"), primary_key=True),
    Column("first_index", Integer, primary_key=True),
    Column("token_ids_json", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("logprobs_json", Text, nullable=True),  # per token, when the job asked (0004_api_keys)
)

# Signed heartbeats stored one row each before 0017_beats_uptime_spans (now only read and pruned):
# each proves the node was online when the coordinator received it (liveness_rows.proof_times).
node_heartbeats = Table(
    "node_heartbeats", metadata,
    Column("node_id", String(64), ForeignKey("nodes.node_id"), primary_key=True),
    Column("sent_at_ms", BigInteger, primary_key=True),  # the node's clock, signed
    Column("received_at_ms", BigInteger, nullable=False),  # the coordinator's clock
    Column("mode", String(16), nullable=False),
    Column("running_jobs", Integer, nullable=False),
    Column("owner_active", Boolean, nullable=False),
    Column("accepting_jobs", Boolean, nullable=False),
    Column("memory_cap_bytes", BigInteger, nullable=False),  # 0 means no cap, as signed
    Column("signature", LargeBinary(64), nullable=False),
)
Index("ix_node_heartbeats_received", node_heartbeats.c.node_id, node_heartbeats.c.received_at_ms)

# Signed heartbeats aggregated (0017_beats_uptime_spans): one row per run of heartbeats of one
# mode with no gap longer than the heartbeat credit; it proves [first, last + credit) online as
# its beats' rows did (coordinator/nodes/uptime.py). node_heartbeats keeps the older rows.
node_uptime_spans = Table(
    "node_uptime_spans", metadata,
    Column("node_id", String(64), ForeignKey("nodes.node_id"), primary_key=True),
    Column("first_received_ms", BigInteger, primary_key=True),  # the coordinator's clock
    Column("last_received_ms", BigInteger, nullable=False),
    Column("mode", String(16), nullable=False),
    Column("first_sent_at_ms", BigInteger, nullable=False),  # the node's clock, signed
    Column("last_sent_at_ms", BigInteger, nullable=False),
    Column("beats", Integer, nullable=False),
    Column("first_signature", LargeBinary(64), nullable=False),
    Column("last_signature", LargeBinary(64), nullable=False),
)
Index("ix_node_uptime_spans_last", node_uptime_spans.c.node_id, node_uptime_spans.c.last_received_ms)

node_benchmarks = Table(
    "node_benchmarks", metadata,
    Column("node_id", String(64), ForeignKey("nodes.node_id"), primary_key=True),
    Column("measured_at_ms", BigInteger, primary_key=True),
    Column("received_at_ms", BigInteger, nullable=False),
    Column("memory_bandwidth_gb_s", Float, nullable=False),
    Column("decode_tokens_per_s", Float, nullable=False),
    Column("prefill_tokens_per_s", Float, nullable=False),
    Column("reference_model", String(256), nullable=False),
    Column("reference_weights_bytes", BigInteger, nullable=False),
    Column("run_time_ms", BigInteger, nullable=False),
    Column("flag", Text, nullable=True),
    Column("batch_decode_json", Text, nullable=False, server_default="[]"),  # as nodes'
)

# Pods declared by their leaders; placed on once every member is registered.
pods = Table(
    "pods", metadata,
    Column("pod_id", String(128), primary_key=True),
    Column("leader_node_id", String(64), ForeignKey("nodes.node_id"), nullable=False),
    Column("members_json", Text, nullable=False),
    Column("links_json", Text, nullable=False),
    Column("declared_at_ms", BigInteger, nullable=False),
)

# One row. A durable write to it makes every transaction committed before it durable too
# (Database.make_durable): both SQLite's and PostgreSQL's write-ahead logs flush in order.
durability_marks = Table(
    "durability_marks", metadata,
    Column("id", Integer, primary_key=True),
    Column("mark", BigInteger, nullable=False),
)

# Each model id bound to one set of weights and one spec (0012_model_catalog): by the
# coordinator (its verifier's models, or `mlxnet catalog pin`), else by the first node to
# serve it. A node that declares other weights or another spec under the id is refused.
model_catalog = Table(
    "model_catalog", metadata,
    Column("model_id", String(1024), primary_key=True),
    Column("weights_digest", String(64), nullable=False),
    Column("spec_json", Text, nullable=False),  # the ModelSpec, as nodes.models_json holds one
    Column("source", String(16), nullable=False),  # coordinator or node
    Column("bound_by", String(128), nullable=False),  # the node id, or who pinned it
    Column("bound_at_ms", BigInteger, nullable=False),
)

# Registration nonces (RegisterChallenge), in the shared database so any coordinator may redeem
# one another issued; a redeem deletes its row, so of two racing coordinators one wins
# (0015_strangers_checks). Expired rows are purged as new ones are issued.
registration_nonces = Table(
    "registration_nonces", metadata,
    Column("nonce_sha256", String(64), primary_key=True),
    Column("public_key", LargeBinary(32), nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False, index=True),
)

# Challenge benchmarks the coordinator sent a verified Mac at a random time, with its own random
# prompt and seed (coordinator/nodes/spot_benchmarks.py), and how each ended (0015_strangers_checks).
node_challenges = Table(
    "node_challenges", metadata,
    Column("challenge_id", String(64), primary_key=True),
    Column("node_id", String(64), ForeignKey("nodes.node_id"), nullable=False, index=True),
    Column("model_id", String(1024), nullable=False),
    Column("prompt", Text, nullable=False),
    Column("seed", BigInteger, nullable=False),
    Column("decode_tokens", Integer, nullable=False),
    Column("claimed_tokens_per_s", Float, nullable=False),  # the node's benchmark: what is checked
    Column("issued_at_ms", BigInteger, nullable=False),
    Column("sent_at_ms", BigInteger, nullable=True),  # first handed to the node's stream
    Column("answered_at_ms", BigInteger, nullable=True),
    Column("outcome", Text, nullable=True),  # "passed", or why the answer does not fit the claim
    # An answer that fit in time waits here, answered with no outcome, for its replay
    # (token ids as big-endian u32s; 0019_challenge_replays).
    Column("receipt_body", LargeBinary, nullable=True),
    Column("receipt_signature", LargeBinary, nullable=True),
    Column("token_ids", LargeBinary, nullable=True),
)
