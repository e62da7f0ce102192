"""What nodes report about themselves: heartbeats, lending state, benchmarks, leaving.

A signed heartbeat is verified here and counted in the node's uptime span
(coordinator.nodes.uptime), the proof the node was online that the ledger turns into
Ultra-seat availability; an unsigned one only keeps the session alive. Everything
here that touches the database takes the caller's session.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.benchmarks import BenchmarkResult
from contracts.hardware import ChipTier
from contracts.ids import JobId
from contracts.lending import Heartbeat, LendingMode, LendingState, heartbeat_message
from contracts.signing import signature_is_valid
from coordinator.errors import InvalidRequest, PermissionDenied
from coordinator.model import ACTIVE_STATUSES, JobStatus, NodeRecord
from coordinator.nodes.benchmark_check import benchmark_flag
from coordinator.storage import job_rows, liveness_rows, node_rows

log = logging.getLogger(__name__)

HEARTBEAT_CLOCK_SKEW_MS_MAX = 5 * 60 * 1000  # a signed heartbeat is only good this long
WARM_MODELS_MAX = 64
RUNNING_JOBS_MAX = 1024
# Signed heartbeats are kept long enough for any epoch still open to count them.
HEARTBEAT_RETENTION_MS = 35 * 24 * 3600 * 1000
HEARTBEAT_PRUNE_INTERVAL_MS = 3600 * 1000
_last_prune_ms = 0  # per process: several coordinators pruning the same rows is harmless


@dataclass(frozen=True)
class HeartbeatReport:
    running_jobs: int
    sent_at_ms: int = 0  # 0 in an unsigned heartbeat
    lending: LendingState | None = None  # None from agents that predate lending modes
    warm_models: tuple[str, ...] = ()
    benchmark: BenchmarkResult | None = None
    signature: bytes = b""


def check_lending(node: NodeRecord, lending: LendingState) -> None:
    """Refuse terms the node cannot honour: the Ultra seat is for Ultra chips only."""
    if lending.mode is LendingMode.ULTRA_SEAT and node.hardware.chip_tier is not ChipTier.ULTRA:
        raise InvalidRequest(f"mode ultra_seat needs an Ultra chip and this node reports "
                             f"{node.hardware.chip!r}; use mode dedicated")


def check_report(node: NodeRecord, report: HeartbeatReport) -> None:
    if not 0 <= report.running_jobs <= RUNNING_JOBS_MAX:
        raise InvalidRequest(f"running_jobs must be between 0 and {RUNNING_JOBS_MAX}")
    if len(report.warm_models) > WARM_MODELS_MAX:
        raise InvalidRequest(f"report at most {WARM_MODELS_MAX} warm models")
    if report.lending is not None:
        check_lending(node, report.lending)


def verified_heartbeat(node: NodeRecord, report: HeartbeatReport, now_ms: int) -> Heartbeat:
    """The signed heartbeat, once its clock and signature check out (whether it is newer than the
    node's last one is the uptime book's to say: coordinator.nodes.uptime)."""
    if report.lending is None:
        raise InvalidRequest("a signed heartbeat must carry the lending state it signs")
    if abs(now_ms - report.sent_at_ms) > HEARTBEAT_CLOCK_SKEW_MS_MAX:
        raise InvalidRequest("heartbeat sent_at_ms is more than 5 minutes from the "
                             "coordinator's clock; check the node's clock")
    heartbeat = Heartbeat(node.node_id, report.sent_at_ms, report.running_jobs, report.lending)
    if not signature_is_valid(node.public_key, heartbeat_message(heartbeat), report.signature):
        raise PermissionDenied(f"heartbeat signature does not verify with node "
                               f"{node.node_id}'s key")
    return heartbeat


def accept_benchmark(session: Session, node: NodeRecord, result: BenchmarkResult,
                     now_ms: int) -> str | None:
    """Store a self-benchmark and flag it when it does not fit the claimed chip."""
    flag = benchmark_flag(node.hardware, result)
    if flag is not None:
        log.warning("node %s benchmark flagged: %s", node.node_id, flag)
    node_rows.save_benchmark(session, node.node_id, result, now_ms, flag)
    return flag


def hand_back_job(session: Session, node: NodeRecord, job_id: str, reason: str,
                  now_ms: int) -> list[str]:
    """The node gives a running job back so it runs elsewhere; returns the nodes freed.

    Unlike a node that vanished mid-stream, this node says the job is unfinished,
    so the job goes back to the queue even after tokens were streamed: its
    partial tokens are dropped and the next Mac's output replaces them.
    """
    # The job's row first, as every path that ends a job locks it: job, then its assignments.
    job = job_rows.job_by_id(session, job_id, for_update=True)
    if job is None or node.node_id not in job.node_ids or job.status not in ACTIVE_STATUSES:
        return []  # already finished, handed back or never ours: nothing to give back
    freed = job_rows.release_assignments(session, job_id)
    job_rows.delete_tokens(session, job_id)
    job_rows.transition_job(session, job_id, ACTIVE_STATUSES, status=JobStatus.QUEUED,
                           assigned_at_ms=None, started_at_ms=None,  # its tokens and their proof go
                           partial_receipt_body=None, partial_receipt_signature=None)
    log.info("node %s handed back job %s: %s", node.node_id, job_id, reason)
    return freed


def leave(session: Session, node: NodeRecord, reason: str, now_ms: int) -> list[JobId]:
    """Stop placing on the node and hand back its jobs; it may register again later."""
    touched = []
    for job in job_rows.active_jobs_for_node(session, node.node_id):
        if hand_back_job(session, node, job.job_id, f"node left: {reason}", now_ms):
            touched.append(job.job_id)
    node_rows.mark_left(session, node.node_id, now_ms)
    return touched


def prune_due(now_ms: int) -> bool:
    return now_ms - _last_prune_ms >= HEARTBEAT_PRUNE_INTERVAL_MS


def prune_heartbeats_now_and_then(session: Session, now_ms: int) -> int:
    """Drop heartbeats and spans past retention, at most once an hour per process."""
    global _last_prune_ms
    if not prune_due(now_ms):
        return 0
    _last_prune_ms = now_ms
    before_ms = now_ms - HEARTBEAT_RETENTION_MS
    return node_rows.prune_heartbeats(session, before_ms) + liveness_rows.prune_spans(session, before_ms)
