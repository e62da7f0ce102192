"""Every coordinator metric's name and help, in one place (the dashboard test reads them here)."""

from __future__ import annotations

PREFIX = "mlxnet:"

# Request metrics, named as vLLM's with our prefix, labelled by model_name.
TIME_TO_FIRST_TOKEN = PREFIX + "time_to_first_token_seconds"
INTER_TOKEN_LATENCY = PREFIX + "inter_token_latency_seconds"
E2E_REQUEST_LATENCY = PREFIX + "e2e_request_latency_seconds"
REQUEST_QUEUE_TIME = PREFIX + "request_queue_time_seconds"
NUM_REQUESTS_RUNNING = PREFIX + "num_requests_running"
NUM_REQUESTS_WAITING = PREFIX + "num_requests_waiting"
PROMPT_TOKENS = PREFIX + "prompt_tokens"  # exposed with _total, as a counter
GENERATION_TOKENS = PREFIX + "generation_tokens"
REQUEST_SUCCESS = PREFIX + "request_success"

# The network's own.
PLACEMENTS = PREFIX + "placements"  # {outcome}
PLACEMENT_REFUSALS = PREFIX + "placement_refusals"  # {reason, permanent}
PLACEMENT_FILTERED_CANDIDATES = PREFIX + "placement_filtered_candidates"  # {kind, reason}
MACS = PREFIX + "macs"  # {state}
HEARTBEATS = PREFIX + "heartbeats"
STREAMS_OPEN = PREFIX + "streams_open"  # {kind}
VERIFICATION_CHECKS = PREFIX + "verification_checks"  # {outcome}
CREDITS_HELD = PREFIX + "operator_credits_held_base_units"  # pending now
CREDITS_POSTED = PREFIX + "operator_credits_posted_base_units"  # all time, a counter
CREDITS_VOIDED = PREFIX + "operator_credits_voided_base_units"  # all time, a counter
LEDGER_TRANSFERS = PREFIX + "ledger_transfers"  # all time, a counter
READINGS_FAILED = PREFIX + "metrics_readings_failed"  # scrapes whose database reading failed
# Several coordinators on one database (coordinator/live/pg_relay.py).
EVENT_BUS_LAG = PREFIX + "event_bus_lag_seconds"  # another coordinator's publish to arrival here
EVENT_BUS_UP = PREFIX + "event_bus_up"  # 1 while other coordinators' news arrives, else 0
EVENT_BUS_LAG_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0,
                           2.5, 5.0, 10.0)

# As vLLM's buckets, so panels built for vLLM read the same.
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
INTER_TOKEN_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                         2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                             40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

# finished_reason, as vLLM's (stop, length, abort), and error for a job that failed.
FINISHED_STOP = "stop"
FINISHED_LENGTH = "length"
FINISHED_ABORT = "abort"
FINISHED_ERROR = "error"
FINISHED_REASONS = (FINISHED_STOP, FINISHED_LENGTH, FINISHED_ABORT, FINISHED_ERROR)

# Macs by state, as MLX World colours them.
MAC_WORKING = "working"  # online, running a job
MAC_IDLE = "idle"  # online, free
MAC_OWNER_BACK = "owner_back"  # online, its owner is using it (idle lending): no new work
MAC_OFFLINE = "offline"  # heartbeats stopped, or it left
MAC_STATES = (MAC_WORKING, MAC_IDLE, MAC_OWNER_BACK, MAC_OFFLINE)

STREAM_NODE = "node_assignments"  # a node agent's assignment stream
STREAM_CONSUMER = "consumer_tokens"  # a consumer's token stream (gRPC or HTTP)
