"""Places queued jobs: snapshot the fleet, ask the pure planner, commit with a re-check.

The planner (coordinator.placement) decides over a snapshot; this module is
the shell that reads the snapshot from the database and commits decisions.
Capacity is checked again under row locks at commit, so two coordinators on
one PostgreSQL never over-commit a Mac.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace

from sqlalchemy.orm import Session

from contracts.ids import JobId, NodeId
from contracts.lending import LendingMode as NodeLendingMode
from contracts.pods import PodDeclaration
from coordinator import node_records, records
from coordinator.catalog import model_catalog
from coordinator.config import CoordinatorConfig
from coordinator.placement.candidates import (
    FleetSnapshot, JobRequest, LendingMode, MacCandidate, PodCandidate, PodLink,
)
from coordinator.placement.decision import Placement, Unplaceable
from coordinator.placement.planner import place
from coordinator.records import JobRecord, JobStatus, NodeRecord
from coordinator.verification import store as check_store
from coordinator.verification.policy import TrustRecord, reputation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchedulingPass:
    placed: tuple[tuple[JobId, tuple[NodeId, ...]], ...]
    failed: tuple[JobId, ...]  # refused: nothing in the fleet could ever run them


def mac_candidates(nodes: list[NodeRecord], committed: dict[str, tuple[int, int]],
                   now_ms: int, config: CoordinatorConfig,
                   reputations: dict[str, float] | None = None) -> tuple[MacCandidate, ...]:
    candidates = []
    for node in nodes:
        memory, running = committed.get(node.node_id, (0, 0))
        lending = node.lending
        candidates.append(MacCandidate(
            node_id=node.node_id, hardware=node.hardware,
            online=(now_ms - node.last_heartbeat_ms <= config.node_offline_after_ms
                    and node.left_at_ms is None),
            committed_memory_bytes=memory, running_jobs=running,
            max_concurrent_jobs=node.max_concurrent_jobs,
            served_models=frozenset(m.model_id for m in node.models),
            warm_models=frozenset(node.warm_models),
            mode=LendingMode.IDLE if lending.mode is NodeLendingMode.IDLE else LendingMode.DEDICATED,
            # A node whose terms forbid work now (owner back, battery, heat, schedule) is
            # filtered like an owner at the keyboard: it will take work again later.
            owner_active=lending.owner_active or not lending.accepting_jobs,
            memory_cap_bytes=lending.memory_cap_bytes,
            measured_bandwidth_gb_s=node.measured_bandwidth_gb_s,
            reputation=(reputations or {}).get(node.node_id, 1.0),
        ))
    return tuple(candidates)


def pod_candidates(pods: list[PodDeclaration], node_ids: set[str]) -> tuple[PodCandidate, ...]:
    """Declared pods whose members have all registered; the planner checks they are online."""
    return tuple(
        PodCandidate(pod_id=pod.pod_id, members=pod.members, links=tuple(
            PodLink(cable.a, cable.b, cable.kind, cable.cables) for cable in pod.cables))
        for pod in pods if pod.cables and set(pod.members) <= node_ids)


def snapshot(session: Session, now_ms: int, config: CoordinatorConfig) -> tuple[FleetSnapshot, list[NodeRecord]]:
    """The fleet placement may use: quarantined nodes (failed checks) are left out entirely."""
    nodes = records.all_nodes(session)
    trust = check_store.all_node_trust(session)
    usable = [n for n in nodes if n.node_id not in trust or trust[n.node_id].quarantined_at_ms is None]
    reputations = {n.node_id: reputation(trust[n.node_id].record if n.node_id in trust
                                         else TrustRecord(), config.trust) for n in usable}
    macs = mac_candidates(usable, records.committed_by_node(session), now_ms, config, reputations)
    pods = pod_candidates(node_records.all_pods(session), {node.node_id for node in usable})
    return FleetSnapshot(macs=macs, pods=pods), nodes


def _without(fleet: FleetSnapshot, excluded: frozenset[str]) -> FleetSnapshot:
    """The fleet minus nodes that failed this job's check (it is their job's re-run)."""
    return replace(fleet, macs=tuple(m for m in fleet.macs if m.node_id not in excluded),
                   pods=tuple(p for p in fleet.pods if not excluded & set(p.members)))


def job_request(job: JobRecord, catalog: dict) -> JobRequest | None:
    spec = catalog.get(job.model_id)
    if spec is None:
        return None
    return JobRequest(job_id=job.job_id, model=spec, context_tokens=job.context_tokens,
                      min_decode_tokens_per_s=job.min_decode_tokens_per_s)


def _capacity_still_free(session: Session, placement: Placement, fleet: FleetSnapshot) -> bool:
    """Re-read commitments under the row locks; another coordinator may have placed meanwhile."""
    records.lock_nodes(session, placement.node_ids)
    committed = records.committed_by_node(session)
    by_id = {mac.node_id: mac for mac in fleet.macs}
    for node_id, reserved in zip(placement.node_ids, placement.reserved_memory_bytes):
        mac = by_id[node_id]
        memory, running = committed.get(node_id, (0, 0))
        if memory != mac.committed_memory_bytes or running != mac.running_jobs:
            return False
    return True


def _commit(session: Session, job: JobRecord, placement: Placement, now_ms: int) -> bool:
    attempt = job.attempt + 1
    moved = records.transition_job(
        session, job.job_id, frozenset({JobStatus.QUEUED}), status=JobStatus.ASSIGNED,
        attempt=attempt, strategy=placement.strategy, layer_split=placement.layer_split,
        explanation_json=json.dumps(placement.explanation.to_dict()), assigned_at_ms=now_ms)
    if moved:
        records.add_assignments(session, job.job_id, attempt, tuple(
            zip(placement.node_ids, placement.reserved_memory_bytes, placement.layer_split)))
    return moved


def _with_commitment(fleet: FleetSnapshot, placement: Placement) -> FleetSnapshot:
    shares = dict(zip(placement.node_ids, placement.reserved_memory_bytes))
    macs = tuple(
        replace(mac, committed_memory_bytes=mac.committed_memory_bytes + shares[mac.node_id],
                running_jobs=mac.running_jobs + 1) if mac.node_id in shares else mac
        for mac in fleet.macs)
    return replace(fleet, macs=macs)


def place_submitted(session: Session, job: JobRecord, decision: Placement, fleet: FleetSnapshot,
                    now_ms: int) -> bool:
    """Commit a new job's placement in its submit transaction, when no older job waits.

    Saves the job a scheduler pass on its way to a Mac; an older queued job keeps
    its turn, so the new one then waits for the pass like any other.
    """
    if records.queue_position(session, job) != 1:
        return False
    return _capacity_still_free(session, decision, fleet) and _commit(session, job, decision, now_ms)


def schedule_queued(session: Session, now_ms: int, config: CoordinatorConfig) -> SchedulingPass:
    """One pass over the queue, oldest first; jobs that fit nowhere now keep waiting."""
    fleet, nodes = snapshot(session, now_ms, config)
    catalog = model_catalog(nodes)
    placed: list[tuple[JobId, tuple[NodeId, ...]]] = []
    failed: list[JobId] = []
    queued = records.queued_jobs(session, config.queued_jobs_scan_max)
    excluded = check_store.excluded_nodes(session, [job.job_id for job in queued])
    for job in queued:
        request = job_request(job, catalog)
        job_fleet = _without(fleet, excluded[job.job_id]) if job.job_id in excluded else fleet
        decision = place(request, job_fleet) if request is not None else None
        if decision is None or (isinstance(decision, Unplaceable) and decision.permanent):
            reason = decision.reason if decision is not None else f"no node serves {job.model_id}"
            if records.transition_job(session, job.job_id, frozenset({JobStatus.QUEUED}),
                                      status=JobStatus.FAILED, error=f"unplaceable: {reason}",
                                      finished_at_ms=now_ms):
                failed.append(job.job_id)
            continue
        if isinstance(decision, Unplaceable):
            records.transition_job(session, job.job_id, frozenset({JobStatus.QUEUED}),
                                   explanation_json=json.dumps(decision.explanation.to_dict()))
            continue
        if _capacity_still_free(session, decision, fleet) and _commit(session, job, decision, now_ms):
            placed.append((job.job_id, decision.node_ids))
            fleet = _with_commitment(fleet, decision)
    return SchedulingPass(tuple(placed), tuple(failed))
