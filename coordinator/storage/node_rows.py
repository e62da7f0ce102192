"""Node rows in, NodeRecords out: registrations, heartbeats, benchmarks, pods, leaving.

Every function takes the caller's session and never commits, so a caller moves a
node, its jobs and its ledger entries in one transaction.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import dataclass

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.orm import Session

from contracts.benchmarks import BenchmarkResult
from contracts.hardware import ChipTier, HardwareReport, LinkKind, ThunderboltLink
from contracts.ids import NodeId, OperatorId
from contracts.lending import LendingMode, LendingState
from contracts.models import ModelSpec
from contracts.pods import PodCable, PodDeclaration
from coordinator.model import JobRecord, NodeRecord
from coordinator.storage.tables import job_assignments, node_benchmarks, node_heartbeats, nodes, pods

log = logging.getLogger(__name__)


def hardware_to_json(hardware: HardwareReport) -> str:
    return json.dumps(dataclasses.asdict(hardware), sort_keys=True)


def stored_gb_s(value: float | None, what: str) -> float | None:
    """A bandwidth read back from the database: one that is not a finite, non-negative number
    (stored before the edge checked it) reads as unknown (None), so no read fails on it."""
    if value is None or (math.isfinite(value) and value >= 0):
        return value
    log.warning("a stored %s of %s is not a finite bandwidth; reading it as unknown", what, value)
    return None


def hardware_from_json(text: str) -> HardwareReport:
    fields = json.loads(text)
    fields["memory_bandwidth_gb_s"] = stored_gb_s(fields["memory_bandwidth_gb_s"],
                                                  "declared bandwidth") or 0.0
    fields["chip_tier"] = ChipTier(fields["chip_tier"])
    fields["thunderbolt_links"] = tuple(ThunderboltLink(**link) for link in fields["thunderbolt_links"])
    return HardwareReport(**fields)


def models_to_json(models: tuple[ModelSpec, ...]) -> str:
    return json.dumps([dataclasses.asdict(m) for m in models], sort_keys=True)


def models_from_json(text: str) -> tuple[ModelSpec, ...]:
    return tuple(ModelSpec(**fields) for fields in json.loads(text))


def _node_from_row(row) -> NodeRecord:  # type: ignore[no-untyped-def]
    return NodeRecord(
        node_id=NodeId(row.node_id), public_key=row.public_key,
        operator_id=OperatorId(row.operator_id), display_name=row.display_name,
        hardware=hardware_from_json(row.hardware_json), models=models_from_json(row.models_json),
        max_concurrent_jobs=row.max_concurrent_jobs, registered_at_ms=row.registered_at_ms,
        last_heartbeat_ms=row.last_heartbeat_ms, lending=_lending_from_row(row),
        warm_models=tuple(json.loads(row.warm_models_json)),
        measured_bandwidth_gb_s=stored_gb_s(row.measured_bandwidth_gb_s, "measured bandwidth"),
        benchmark_flag=row.benchmark_flag, left_at_ms=row.left_at_ms,
        batch_decode_tokens_per_s=_batch_decode_from_json(row.batch_decode_json),
        challenge_flag=row.challenge_flag, challenge_passed_at_ms=row.challenge_passed_at_ms,
    )


def _batch_decode_to_json(points: tuple[tuple[int, float], ...]) -> str:
    return json.dumps([[size, rate] for size, rate in points])


def _batch_decode_from_json(text: str) -> tuple[tuple[int, float], ...]:
    points = tuple((int(size), float(rate)) for size, rate in json.loads(text or "[]"))
    if [size for size, _ in points] != sorted({size for size, _ in points}) or not all(
            size >= 1 and math.isfinite(rate) and rate > 0 for size, rate in points):
        log.warning("skipping stored batch decode figures that are out of order or not positive: %s", text)
        return ()
    return points


def _lending_from_row(row) -> LendingState:  # type: ignore[no-untyped-def]
    return LendingState(mode=LendingMode(row.lending_mode), owner_active=row.owner_active,
                        accepting_jobs=row.accepting_jobs, reason=row.lending_reason,
                        memory_cap_bytes=row.memory_cap_bytes)


def _lending_values(lending: LendingState, warm_models: tuple[str, ...]) -> dict[str, object]:
    return dict(lending_mode=lending.mode.value, owner_active=lending.owner_active,
                accepting_jobs=lending.accepting_jobs, lending_reason=lending.reason,
                memory_cap_bytes=lending.memory_cap_bytes,
                warm_models_json=json.dumps(sorted(warm_models)))


def save_node(session: Session, node: NodeRecord, session_token_sha256: str) -> None:
    """Insert or replace a node's registration (a node re-registers when its agent restarts)."""
    hardware = node.hardware
    values = dict(
        public_key=node.public_key, operator_id=node.operator_id, display_name=node.display_name,
        chip=hardware.chip, chip_tier=hardware.chip_tier.value, memory_bytes=hardware.memory_bytes,
        gpu_working_set_bytes=hardware.gpu_working_set_bytes,
        memory_bandwidth_gb_s=hardware.memory_bandwidth_gb_s, os_name=hardware.os_name,
        simulated=hardware.simulated, hardware_json=hardware_to_json(hardware),
        models_json=models_to_json(node.models), max_concurrent_jobs=node.max_concurrent_jobs,
        session_token_sha256=session_token_sha256, registered_at_ms=node.registered_at_ms,
        last_heartbeat_ms=node.last_heartbeat_ms, running_jobs_reported=0, left_at_ms=None,
        **_lending_values(node.lending, node.warm_models),
    )
    existing = session.execute(
        select(nodes.c.node_id).where(nodes.c.node_id == node.node_id).with_for_update()
    ).first()
    if existing is None:
        session.execute(insert(nodes).values(node_id=node.node_id, **values))
    else:
        session.execute(update(nodes).where(nodes.c.node_id == node.node_id).values(**values))


def node_by_id(session: Session, node_id: str) -> NodeRecord | None:
    row = session.execute(_NODE_BY_ID, {"node_id": node_id}).first()
    return None if row is None else _node_from_row(row)


def node_by_session(session: Session, session_token_sha256: str) -> NodeRecord | None:
    row = session.execute(_NODE_BY_SESSION, {"token": session_token_sha256}).first()
    return None if row is None else _node_from_row(row)


def all_nodes(session: Session) -> list[NodeRecord]:
    return [_node_from_row(r) for r in session.execute(_ALL_NODES)]


@dataclass(frozen=True)
class PeerFacts:
    """What choosing a peer checker reads of a node: a few columns, not its whole row."""

    node_id: NodeId
    operator_id: OperatorId
    served: tuple[tuple[str, str], ...]  # (model id, weights digest) of each model it serves
    last_heartbeat_ms: int
    left_at_ms: int | None
    accepting_jobs: bool


_PEER_FACTS = select(nodes.c.node_id, nodes.c.operator_id, nodes.c.models_json, nodes.c.last_heartbeat_ms,
                     nodes.c.left_at_ms, nodes.c.accepting_jobs).order_by(nodes.c.node_id)


def all_peer_facts(session: Session) -> list[PeerFacts]:
    """Every node's PeerFacts, read on each peer-check pass (all_nodes parsed every node's
    hardware and models there). Nodes mostly declare the same models: each text is parsed once."""
    served_by_text: dict[str, tuple[tuple[str, str], ...]] = {}
    found = []
    for node_id, operator_id, models_json, last_heartbeat_ms, left_at_ms, accepting_jobs in session.execute(_PEER_FACTS):
        served = served_by_text.get(models_json)
        if served is None:
            served = tuple((m.model_id, m.weights_digest) for m in models_from_json(models_json))
            served_by_text[models_json] = served
        found.append(PeerFacts(NodeId(node_id), OperatorId(operator_id), served, last_heartbeat_ms, left_at_ms,
                               bool(accepting_jobs)))
    return found


_REGISTRATIONS_DIGEST = select(func.count(), func.coalesce(func.sum(nodes.c.registered_at_ms), 0)).select_from(nodes)


def registrations_digest(session: Session) -> tuple[int, int]:
    """(nodes, sum of their registration times): any registration or re-registration changes it."""
    count, registered_sum = session.execute(_REGISTRATIONS_DIGEST).one()
    return int(count), int(registered_sum)


# Built once, with the id list as an expanding parameter: a placement re-reads a few nodes
# per decision, and building the statement cost more than running it.
_NODES_BY_IDS = select(nodes).where(nodes.c.node_id.in_(bindparam("node_ids", expanding=True)))
_LOCK_NODES = select(nodes.c.node_id).where(
    nodes.c.node_id.in_(bindparam("node_ids", expanding=True))).with_for_update()


# One id (a submit re-reads its one chosen Mac): an expanding list is rendered anew on every
# execution, a plain parameter is not.
_NODE_BY_ID = select(nodes).where(nodes.c.node_id == bindparam("node_id"))
_ALL_NODES = select(nodes).order_by(nodes.c.node_id)
_NODE_BY_SESSION = select(nodes).where(nodes.c.session_token_sha256 == bindparam("token"))


def nodes_by_ids(session: Session, node_ids: list[str]) -> list[NodeRecord]:
    if len(node_ids) == 1:
        return [_node_from_row(r) for r in session.execute(_NODE_BY_ID, {"node_id": node_ids[0]})]
    found: list[NodeRecord] = []
    for start in range(0, len(node_ids), 500):  # keep IN lists short
        rows = session.execute(_NODES_BY_IDS, {"node_ids": node_ids[start:start + 500]})
        found += [_node_from_row(r) for r in rows]
    return found


def lock_nodes(session: Session, node_ids: tuple[str, ...]) -> None:
    """Row-lock nodes on PostgreSQL so capacity is re-checked under the lock at commit."""
    session.execute(_LOCK_NODES, {"node_ids": list(node_ids)})


def record_heartbeat(session: Session, node_id: str, now_ms: int, running_jobs: int,
                     lending: LendingState | None = None,
                     warm_models: tuple[str, ...] | None = None) -> None:
    """Liveness, plus the node's lending state when its heartbeat carried one."""
    values: dict[str, object] = dict(last_heartbeat_ms=now_ms, running_jobs_reported=running_jobs)
    session.execute(update(nodes).where(nodes.c.node_id == node_id).values(**values))
    if lending is not None:
        # A heartbeat sent before the node left may arrive after; leaving has the last word.
        session.execute(update(nodes).where(nodes.c.node_id == node_id, nodes.c.left_at_ms.is_(None))
                        .values(**_lending_values(lending, warm_models or ())))


def prune_heartbeats(session: Session, before_ms: int) -> int:
    """Drop pre-0017 heartbeat rows received before before_ms (older than any open epoch); returns how many."""
    result = session.execute(node_heartbeats.delete().where(
        node_heartbeats.c.received_at_ms < before_ms))
    return result.rowcount


# --- benchmarks --------------------------------------------------------

BENCHMARKS_KEPT_MAX = 32  # per node: enough history to see a trend, never unbounded


@dataclass(frozen=True)
class StoredBenchmark:
    result: BenchmarkResult
    received_at_ms: int
    flag: str | None


def save_benchmark(session: Session, node_id: str, result: BenchmarkResult, received_at_ms: int,
                   flag: str | None) -> None:
    """Keep the benchmark (a re-sent one replaces itself) and make it the node's current figures."""
    session.execute(delete(node_benchmarks).where(
        node_benchmarks.c.node_id == node_id,
        node_benchmarks.c.measured_at_ms == result.measured_at_ms))
    session.execute(insert(node_benchmarks).values(
        node_id=node_id, measured_at_ms=result.measured_at_ms, received_at_ms=received_at_ms,
        memory_bandwidth_gb_s=result.memory_bandwidth_gb_s,
        decode_tokens_per_s=result.decode_tokens_per_s,
        prefill_tokens_per_s=result.prefill_tokens_per_s, reference_model=result.reference_model,
        reference_weights_bytes=result.reference_weights_bytes, run_time_ms=result.run_time_ms,
        flag=flag, batch_decode_json=_batch_decode_to_json(result.batch_decode_tokens_per_s)))
    session.execute(update(nodes).where(nodes.c.node_id == node_id).values(
        measured_bandwidth_gb_s=result.memory_bandwidth_gb_s, benchmark_flag=flag,
        batch_decode_json=_batch_decode_to_json(result.batch_decode_tokens_per_s)))
    stale = session.execute(select(node_benchmarks.c.measured_at_ms)
                            .where(node_benchmarks.c.node_id == node_id)
                            .order_by(node_benchmarks.c.measured_at_ms.desc())
                            .offset(BENCHMARKS_KEPT_MAX)).scalars().all()
    if stale:
        session.execute(delete(node_benchmarks).where(
            node_benchmarks.c.node_id == node_id, node_benchmarks.c.measured_at_ms.in_(stale)))


def benchmarks(session: Session, node_id: str) -> list[StoredBenchmark]:
    """The node's kept benchmarks, newest first."""
    rows = session.execute(select(node_benchmarks).where(node_benchmarks.c.node_id == node_id)
                           .order_by(node_benchmarks.c.measured_at_ms.desc()))
    return [StoredBenchmark(BenchmarkResult(
        memory_bandwidth_gb_s=r.memory_bandwidth_gb_s, decode_tokens_per_s=r.decode_tokens_per_s,
        prefill_tokens_per_s=r.prefill_tokens_per_s, reference_model=r.reference_model,
        reference_weights_bytes=r.reference_weights_bytes, measured_at_ms=r.measured_at_ms,
        run_time_ms=r.run_time_ms, batch_decode_tokens_per_s=_batch_decode_from_json(r.batch_decode_json)),
        r.received_at_ms, r.flag) for r in rows
        if _finite_figures(r.memory_bandwidth_gb_s, r.decode_tokens_per_s, r.prefill_tokens_per_s)]


def _finite_figures(*figures: float) -> bool:
    """False for a benchmark stored with an infinite or NaN figure before the edge checked them."""
    if all(math.isfinite(figure) for figure in figures):
        return True
    log.warning("skipping a stored benchmark with a figure that is not finite: %s", figures)
    return False


LEAVING_REASON = "leaving the network"


def mark_left(session: Session, node_id: str, now_ms: int) -> None:
    session.execute(update(nodes).where(nodes.c.node_id == node_id).values(
        left_at_ms=now_ms, accepting_jobs=False, lending_reason=LEAVING_REASON))


EXPIRED_REASON = "expired: silent too long; register again"


def expire_silent(session: Session, silent_since_ms: int, limit: int) -> list[str]:
    """Mark left the nodes not heard from since then (stale registrations); their ids."""
    node_ids = list(session.execute(select(nodes.c.node_id).where(
        nodes.c.last_heartbeat_ms < silent_since_ms, nodes.c.left_at_ms.is_(None))
        .order_by(nodes.c.last_heartbeat_ms).limit(limit)).scalars())
    if node_ids:
        session.execute(update(nodes).where(nodes.c.node_id.in_(node_ids)).values(
            left_at_ms=silent_since_ms, accepting_jobs=False, lending_reason=EXPIRED_REASON))
    return node_ids


# --- pods ----------------------------------------------------------------

def _cables_to_json(cables: tuple[PodCable, ...]) -> str:
    return json.dumps([[c.a, c.b, c.kind.value, c.cables] for c in cables])


def _cables_from_json(text: str) -> tuple[PodCable, ...]:
    return tuple(PodCable(NodeId(a), NodeId(b), LinkKind(kind), cables)
                 for a, b, kind, cables in json.loads(text))


def save_pod(session: Session, pod: PodDeclaration, now_ms: int) -> None:
    """Insert or replace a pod; a node leads at most one, so its older pods are dropped."""
    session.execute(delete(pods).where((pods.c.pod_id == pod.pod_id)
                                       | (pods.c.leader_node_id == pod.leader)))
    session.execute(insert(pods).values(
        pod_id=pod.pod_id, leader_node_id=pod.leader, members_json=json.dumps(list(pod.members)),
        links_json=_cables_to_json(pod.cables), declared_at_ms=now_ms))


def _pod_from_row(row) -> PodDeclaration:  # type: ignore[no-untyped-def]
    return PodDeclaration(pod_id=row.pod_id, leader=NodeId(row.leader_node_id),
                          members=tuple(NodeId(m) for m in json.loads(row.members_json)),
                          cables=_cables_from_json(row.links_json))


_ALL_PODS = select(pods).order_by(pods.c.pod_id)  # built once: every submit reads it


def all_pods(session: Session) -> list[PodDeclaration]:
    return [_pod_from_row(r) for r in session.execute(_ALL_PODS)]


def pod_by_id(session: Session, pod_id: str) -> PodDeclaration | None:
    row = session.execute(select(pods).where(pods.c.pod_id == pod_id)).first()
    return None if row is None else _pod_from_row(row)


def pod_assignment(session: Session, job: JobRecord) -> tuple[PodDeclaration, tuple[int, ...]] | None:
    """The pod a job was placed on and each member's layers, in the pod's rank order."""
    members = set(job.node_ids)
    pod = next((p for p in all_pods(session) if set(p.members) == members), None)
    if pod is None:
        return None
    layers = dict(session.execute(select(job_assignments.c.node_id, job_assignments.c.layers).where(
        job_assignments.c.job_id == job.job_id, job_assignments.c.attempt == job.attempt)).all())
    return pod, tuple(int(layers.get(member, 0)) for member in pod.members)
