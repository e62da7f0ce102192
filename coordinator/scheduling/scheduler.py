"""Places queued jobs: ask the pure planner over the live index, commit with a re-check.

The planner (coordinator.placement) decides over a FleetIndex that coordinator.scheduling.live_fleet
keeps current between passes; this module reads the fleet from the database (whole, or
Mac by Mac) and commits decisions. The chosen Macs are re-read under row locks at commit,
so two coordinators on one PostgreSQL never over-commit a Mac.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.ids import JobId, NodeId
from coordinator.config import CoordinatorConfig
from coordinator.model import JobRecord, JobStatus
from coordinator.placement.candidates import JobRequest
from coordinator.placement.decision import Placement, Unplaceable
from coordinator.placement.index import FleetIndex
from coordinator.placement.planner import place
from coordinator.scheduling import fleet_reads
from coordinator.scheduling.live_fleet import LiveFleet
from coordinator.storage import job_rows, node_rows
from coordinator.storage.database import writes_serialized
from coordinator.verification import store as check_store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchedulingPass:
    placed: tuple[tuple[JobId, tuple[NodeId, ...]], ...]
    failed: tuple[JobId, ...]  # refused: nothing in the fleet could ever run them


def job_request(job: JobRecord, catalog: dict) -> JobRequest | None:
    spec = catalog.get(job.model_id)
    if spec is None:
        return None
    return JobRequest(job_id=job.job_id, model=spec, context_tokens=job.context_tokens,
                      min_decode_tokens_per_s=job.min_decode_tokens_per_s)


def _chosen_macs_current(session: Session, placement: Placement, fleet: LiveFleet, now_ms: int,
                         config: CoordinatorConfig) -> bool:
    """Re-read the chosen Macs under their row locks; another coordinator may have placed meanwhile.

    The decision stands only if the database still says what the index said; otherwise the
    index learns the Macs' current facts and the caller decides again. Where writers are
    serialized (SQLite) a Mac this pass already read cannot have changed: no second read.
    """
    serialized = writes_serialized(session)
    if serialized and fleet.read_this_pass(placement.node_ids):
        return True
    if not serialized:  # on SQLite the write lock this transaction holds covers them
        node_rows.lock_nodes(session, placement.node_ids)
    fresh = fleet_reads.fresh_macs(session, list(placement.node_ids), now_ms, config).macs
    index = fleet.index
    behind = [node_id for node_id in placement.node_ids
              if fresh[node_id] is None or not index.has_mac(node_id) or index.mac(node_id) != fresh[node_id]]
    if behind:
        log.info("placement index was behind the database on %s; re-read", ", ".join(behind))
        fleet.refresh(session, behind, now_ms)
    return not behind


def _assigned(job: JobRecord, placement: Placement, now_ms: int) -> JobRecord:
    """The job as its next attempt on these Macs."""
    return dataclasses.replace(
        job, status=JobStatus.ASSIGNED, attempt=job.attempt + 1, strategy=placement.strategy,
        layer_split=tuple(placement.layer_split), assigned_at_ms=now_ms,
        explanation_json=json.dumps(placement.explanation.to_dict()),
        node_ids=tuple(sorted(placement.node_ids)))  # in job_by_id's order


def _add_assignments(session: Session, job: JobRecord, placement: Placement) -> None:
    job_rows.add_assignments(session, job.job_id, job.attempt, tuple(
        zip(placement.node_ids, placement.reserved_memory_bytes, placement.layer_split)),
        placement.shared_memory_bytes)


def _commit(session: Session, job: JobRecord, placement: Placement, now_ms: int) -> JobRecord | None:
    """Assign the queued job; returns it as now stored (None when it had left the queue)."""
    assigned = _assigned(job, placement, now_ms)
    moved = job_rows.transition_job(
        session, job.job_id, frozenset({JobStatus.QUEUED}), status=assigned.status,
        attempt=assigned.attempt, strategy=assigned.strategy, layer_split=assigned.layer_split,
        explanation_json=assigned.explanation_json, assigned_at_ms=now_ms)
    if not moved:
        return None
    _add_assignments(session, assigned, placement)
    return assigned


def _decide(request: JobRequest, index: FleetIndex, excluded: frozenset[str]) -> Placement | Unplaceable:
    """Over the live index; a re-run's excluded nodes (they failed its check) are filtered out by name."""
    return place(request, index, excluded=excluded)


def assign_new_job(session: Session, job: JobRecord, decision: Placement, fleet: LiveFleet,
                   now_ms: int, config: CoordinatorConfig) -> JobRecord | None:
    """A new job's placement at submit (within fleet.current), when no older job waits: the job
    as it will be stored, assigned; None when it stays queued. Writes nothing: the submit stores
    the job once, then calls record_assignment.

    Saves the job a scheduler pass on its way to a Mac; an older queued job keeps its turn. As
    in a pass, the chosen Macs are re-read under their row locks: if the index was behind the
    database (another coordinator placed there), it learns the Macs' current facts and the
    scheduler's pass places the job.
    """
    if job_rows.any_queued(session):
        return None
    if not _chosen_macs_current(session, decision, fleet, now_ms, config):
        return None
    return _assigned(job, decision, now_ms)


def record_assignment(session: Session, job: JobRecord, decision: Placement, fleet: LiveFleet) -> None:
    """The stored, assigned new job's Macs: its assignments, and the index's commitment."""
    _add_assignments(session, job, decision)
    fleet.record_commit(decision)


def _decide_job(session: Session, job: JobRecord, fleet: LiveFleet, avoid: frozenset[str],
                now_ms: int) -> tuple[JobRequest | None, Placement | Unplaceable | None]:
    request = job_request(job, fleet.catalog())
    decision = _decide(request, fleet.index, avoid) if request is not None else None
    refused = decision is None or (isinstance(decision, Unplaceable) and decision.permanent)
    if refused and not fleet.rebuilt_this_pass:
        # Never refuse a job for good over an index that may be behind the database (a Mac
        # that registered with another coordinator): read the whole fleet and decide again.
        fleet.rebuild(session, now_ms)
        return _decide_job(session, job, fleet, avoid, now_ms)
    return request, decision


def schedule_queued(session: Session, now_ms: int, config: CoordinatorConfig, fleet: LiveFleet) -> SchedulingPass:
    """One pass over the queue, oldest first; jobs that fit nowhere now keep waiting."""
    placed: list[tuple[JobId, tuple[NodeId, ...]]] = []
    failed: list[JobId] = []
    with fleet.current(session, now_ms):
        queued = job_rows.queued_jobs(session, config.queued_jobs_scan_max)
        excluded = check_store.excluded_nodes(session, [job.job_id for job in queued])
        for job in queued:
            avoid = excluded.get(job.job_id, frozenset())
            request, decision = _decide_job(session, job, fleet, avoid, now_ms)
            if decision is None or (isinstance(decision, Unplaceable) and decision.permanent):
                reason = decision.reason if decision is not None else f"no node serves {job.model_id}"
                if job_rows.transition_job(session, job.job_id, frozenset({JobStatus.QUEUED}),
                                          status=JobStatus.FAILED, error=f"unplaceable: {reason}",
                                          finished_at_ms=now_ms):
                    failed.append(job.job_id)
                continue
            if isinstance(decision, Placement) and not _chosen_macs_current(session, decision, fleet, now_ms, config):
                assert request is not None
                decision = _decide(request, fleet.index, avoid)  # once more, over the Macs just re-read
                if isinstance(decision, Placement) and not _chosen_macs_current(session, decision, fleet, now_ms,
                                                                                config):
                    continue  # the database is moving under us: leave the job for the next pass
            if isinstance(decision, Unplaceable):
                job_rows.transition_job(session, job.job_id, frozenset({JobStatus.QUEUED}),
                                       explanation_json=json.dumps(decision.explanation.to_dict()))
                continue
            if _commit(session, job, decision, now_ms) is not None:
                fleet.record_commit(decision)
                placed.append((job.job_id, decision.node_ids))
    return SchedulingPass(tuple(placed), tuple(failed))
