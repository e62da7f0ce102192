"""The SQL edge of MLX World's public pages: read-only, through the caller's session.

Every query is bounded: the fleet is read a page at a time with the filters in
SQL, per-Mac figures are computed for the page's Macs only, and totals are
aggregates. Rows become the pure modules' frozen values here and go no further.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import and_, case, func, not_, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from contracts.hardware import LinkKind
from contracts.lending import LendingMode
from coordinator.placement.config import MemoryConfig
from coordinator.storage.node_rows import stored_gb_s
from coordinator.storage.tables import job_assignments, jobs, nodes, pods
from coordinator.verification.policy import TrustPolicy, TrustRecord, is_quarantined, reputation
from coordinator.verification.store import node_trust
from coordinator.world.fleet import (
    FleetQuery,
    FleetSort,
    NodeFacts,
    NodeStats,
    NodeStatus,
    PodLinkFacts,
    fleet_row,
)
from coordinator.world.tables import node_regions
from coordinator.world.totals import RATE_WINDOW_MS, Candidate, Totals, largest_candidate
from ledger import api as ledger

PODS_READ_MAX = 10_000
FACETS_MAX = 200  # distinct chips or regions offered as filters
# Jobs counted in the last minute's rates must also have been created in the last hour, so
# the query stays on the (status, created_at_ms) index; an hour-long job is left out.
RATE_CREATED_LOOKBACK_MS = 3_600_000
IN_CHUNK = 500  # ids per IN (...) list


@dataclass(frozen=True)
class Liveness:
    now_ms: int
    offline_after_ms: int
    trust: TrustPolicy = TrustPolicy()  # the coordinator's, so reputations match placement's

    @property
    def fresh_since_ms(self) -> int:
        return self.now_ms - self.offline_after_ms


def _online(live: Liveness) -> ColumnElement[bool]:
    return and_(nodes.c.last_heartbeat_ms >= live.fresh_since_ms, nodes.c.left_at_ms.is_(None))


def _busy() -> ColumnElement[bool]:
    active = select(job_assignments.c.node_id).where(job_assignments.c.active.is_(True))
    return nodes.c.node_id.in_(active)


def _smaller(a: ColumnElement[int], b: ColumnElement[int]) -> ColumnElement[int]:
    return case((a < b, a), else_=b)


def _lendable(config: MemoryConfig = MemoryConfig()) -> ColumnElement[int]:
    """As placement's mac_ceiling_bytes: the GPU budget, the operator's cap and, in idle mode,
    the owner's reserve (the larger of a floor and a share of the Mac's memory)."""
    capped = case((nodes.c.memory_cap_bytes.is_(None), nodes.c.gpu_working_set_bytes),
                  else_=_smaller(nodes.c.memory_cap_bytes, nodes.c.gpu_working_set_bytes))
    # The share in whole per-mille, so SQLite and PostgreSQL both stay in integers.
    share = nodes.c.memory_bytes * round(config.owner_reserve_fraction * 1000) // 1000
    reserve = case((share > config.owner_reserve_min_bytes, share), else_=config.owner_reserve_min_bytes)
    idle = _smaller(capped, nodes.c.memory_bytes - reserve)
    return case((nodes.c.lending_mode == LendingMode.IDLE.value, case((idle > 0, idle), else_=0)), else_=capped)


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _filters(query: FleetQuery, live: Liveness) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if query.q:
        needle = _like_escaped(query.q.lower())
        conditions.append(or_(func.lower(nodes.c.display_name).like(f"%{needle}%", escape="\\"),
                              nodes.c.node_id.like(f"{needle}%", escape="\\")))
    if query.status is NodeStatus.OFFLINE:
        conditions.append(not_(_online(live)))
    elif query.status is NodeStatus.ONLINE:
        conditions += [_online(live), not_(_busy())]
    elif query.status is NodeStatus.BUSY:
        conditions += [_online(live), _busy()]
    if query.chip:
        conditions.append(nodes.c.chip == query.chip)
    if query.tier:
        conditions.append(nodes.c.chip_tier == query.tier.value)
    if query.mode:
        conditions.append(nodes.c.lending_mode == query.mode.value)
    if query.region:
        conditions.append(node_regions.c.region == query.region)
    return conditions


_ORDER = {
    FleetSort.JOINED: (nodes.c.registered_at_ms.desc(), nodes.c.node_id),
    FleetSort.NAME: (func.lower(nodes.c.display_name), nodes.c.node_id),
    FleetSort.MEMORY: (nodes.c.memory_bytes.desc(), nodes.c.node_id),
    FleetSort.BANDWIDTH: (func.coalesce(nodes.c.measured_bandwidth_gb_s,
                                        nodes.c.memory_bandwidth_gb_s).desc(), nodes.c.node_id),
}


def _facts(row) -> NodeFacts:  # type: ignore[no-untyped-def]
    hardware = json.loads(row.hardware_json)
    return NodeFacts(
        node_id=row.node_id, display_name=row.display_name, chip=row.chip, chip_tier=row.chip_tier,
        memory_bytes=row.memory_bytes, gpu_working_set_bytes=row.gpu_working_set_bytes,
        gpu_cores=int(hardware.get("gpu_cores", 0)),
        declared_bandwidth_gb_s=stored_gb_s(row.memory_bandwidth_gb_s, "declared bandwidth") or 0.0,
        measured_bandwidth_gb_s=stored_gb_s(row.measured_bandwidth_gb_s, "measured bandwidth"),
        benchmark_flagged=row.benchmark_flag is not None, simulated=row.simulated,
        mode=row.lending_mode, accepting_jobs=row.accepting_jobs, lending_reason=row.lending_reason,
        memory_cap_bytes=row.memory_cap_bytes, warm_models=tuple(json.loads(row.warm_models_json)),
        served_models=tuple(m["model_id"] for m in json.loads(row.models_json)),
        registered_at_ms=row.registered_at_ms, last_heartbeat_ms=row.last_heartbeat_ms,
        left_at_ms=row.left_at_ms, challenge_flag=row.challenge_flag,
        challenge_passed_at_ms=row.challenge_passed_at_ms)


_ROW_COLUMNS = (nodes.c.node_id, nodes.c.display_name, nodes.c.chip, nodes.c.chip_tier,
                nodes.c.memory_bytes, nodes.c.gpu_working_set_bytes, nodes.c.hardware_json,
                nodes.c.memory_bandwidth_gb_s, nodes.c.measured_bandwidth_gb_s,
                nodes.c.benchmark_flag, nodes.c.simulated, nodes.c.lending_mode,
                nodes.c.accepting_jobs, nodes.c.lending_reason, nodes.c.memory_cap_bytes,
                nodes.c.warm_models_json, nodes.c.models_json, nodes.c.registered_at_ms,
                nodes.c.last_heartbeat_ms, nodes.c.left_at_ms, nodes.c.challenge_flag,
                nodes.c.challenge_passed_at_ms, node_regions.c.region)


def _with_regions(statement):  # type: ignore[no-untyped-def]
    return statement.select_from(nodes.outerjoin(node_regions,
                                                 node_regions.c.node_id == nodes.c.node_id))


def fleet_page(session: Session, query: FleetQuery, live: Liveness) -> tuple[int, list[dict[str, object]]]:
    """(how many Macs match, the public rows of the requested page)."""
    conditions = _filters(query, live)
    total = session.execute(_with_regions(select(func.count())).where(*conditions)).scalar_one()
    # Sort and skip over the narrow columns only, then read the page's wide rows by id.
    page_ids = list(session.execute(_with_regions(select(nodes.c.node_id)).where(*conditions)
                                    .order_by(*_ORDER[query.sort]).limit(query.page_size)
                                    .offset(query.offset)).scalars())
    rows = session.execute(_with_regions(select(*_ROW_COLUMNS))
                           .where(nodes.c.node_id.in_(page_ids))).all() if page_ids else []
    position = {node_id: index for index, node_id in enumerate(page_ids)}
    rows.sort(key=lambda row: position[row.node_id])
    return total, rows_json(session, rows, live)


def rows_json(session: Session, rows: list, live: Liveness) -> list[dict[str, object]]:  # type: ignore[type-arg]
    node_ids = [row.node_id for row in rows]
    stats = node_stats(session, node_ids, live.trust)
    pod_of = pod_membership(session)
    return [fleet_row(_facts(row), stats.get(row.node_id, NodeStats()), row.region,
                      pod_of.get(row.node_id), live.now_ms, live.offline_after_ms) for row in rows]


def node_rows(session: Session, node_ids: Iterable[str], live: Liveness) -> dict[str, dict[str, object]]:
    """Public rows of the given Macs (at most a page's worth), by node id."""
    wanted = sorted(set(node_ids))
    assert len(wanted) <= 10_000, "node_rows reads a bounded set of Macs"
    rows = session.execute(_with_regions(select(*_ROW_COLUMNS))
                           .where(nodes.c.node_id.in_(wanted))).all() if wanted else []
    return {row["node_id"]: row for row in rows_json(session, rows, live)}  # type: ignore[misc]


def _trust(session: Session, node_ids: list[str]) -> dict[str, tuple[TrustRecord, bool]]:
    rows = session.execute(select(node_trust).where(node_trust.c.node_id.in_(node_ids)))
    return {row.node_id: (TrustRecord(row.checks_passed, row.checks_failed, row.passed_since_failure),
                          row.quarantined_at_ms is not None) for row in rows}


def node_stats(session: Session, node_ids: list[str], policy: TrustPolicy) -> dict[str, NodeStats]:
    """Per Mac: jobs served, failed and tokens generated (current-attempt assignments) and its trust."""
    if not node_ids:
        return {}
    trust = _trust(session, node_ids)
    own_failure = and_(jobs.c.status == "failed",
                       not_(func.coalesce(jobs.c.error, "").like("cancelled%")),
                       not_(func.coalesce(jobs.c.error, "").like("unplaceable%")))
    served = and_(jobs.c.status == "completed", jobs.c.receipt_verified.is_(True))
    query = (select(job_assignments.c.node_id,
                    func.sum(case((job_assignments.c.active.is_(True), 1), else_=0)),
                    func.sum(case((served, 1), else_=0)),
                    func.sum(case((own_failure, 1), else_=0)),
                    func.sum(case((served, jobs.c.completion_tokens), else_=0)))
             .select_from(job_assignments.join(jobs, and_(jobs.c.job_id == job_assignments.c.job_id,
                                                          jobs.c.attempt == job_assignments.c.attempt)))
             .where(job_assignments.c.node_id.in_(node_ids))
             .group_by(job_assignments.c.node_id))
    counts = {node_id: (int(active or 0), int(done or 0), int(failed or 0), int(tokens or 0))
              for node_id, active, done, failed, tokens in session.execute(query)}
    stats = {}
    for node_id in node_ids:
        record, quarantined = trust.get(node_id, (TrustRecord(), False))
        quarantined = quarantined or is_quarantined(record, policy)
        stats[node_id] = NodeStats(*counts.get(node_id, (0, 0, 0, 0)),
                                   reputation=0.0 if quarantined else reputation(record, policy),
                                   checks_passed=record.checks_passed, checks_failed=record.checks_failed,
                                   quarantined=quarantined)
    return stats


def pod_membership(session: Session) -> dict[str, str]:
    """node id -> the pod it belongs to (the newest declaration wins)."""
    rows = session.execute(select(pods.c.pod_id, pods.c.members_json)
                           .order_by(pods.c.declared_at_ms).limit(PODS_READ_MAX))
    return {member: pod_id for pod_id, members in rows for member in json.loads(members)}


def pod_facts(session: Session, limit: int) -> list[tuple[str, tuple[str, ...], tuple[PodLinkFacts, ...]]]:
    rows = session.execute(select(pods.c.pod_id, pods.c.members_json, pods.c.links_json)
                           .order_by(pods.c.pod_id).limit(limit))
    return [(pod_id, tuple(json.loads(members)),
             tuple(PodLinkFacts(a, b, LinkKind(kind), cables) for a, b, kind, cables in json.loads(links)))
            for pod_id, members, links in rows]


def facets(session: Session) -> dict[str, list[dict[str, object]]]:
    """The values the fleet's filters offer, with how many Macs have each."""
    def counted(column, source):  # type: ignore[no-untyped-def]
        statement = (select(column, func.count()).select_from(source).group_by(column)
                     .order_by(func.count().desc(), column).limit(FACETS_MAX))
        return [{"value": value, "count": count} for value, count in session.execute(statement)]
    regions = node_regions.join(nodes, nodes.c.node_id == node_regions.c.node_id)
    return {"chips": counted(nodes.c.chip, nodes), "tiers": counted(nodes.c.chip_tier, nodes),
            "modes": counted(nodes.c.lending_mode, nodes), "regions": counted(node_regions.c.region, regions)}


def fleet_version(session: Session, live: Liveness) -> tuple[int, ...]:
    """A fingerprint that changes when a Mac joins, leaves, goes on or offline, or changes terms."""
    online = _online(live)
    counts = session.execute(select(
        func.count(), func.max(nodes.c.registered_at_ms),
        func.sum(case((online, 1), else_=0)), func.sum(case((nodes.c.accepting_jobs, 1), else_=0)),
        func.sum(case((nodes.c.left_at_ms.is_not(None), 1), else_=0)),
        func.sum(case((nodes.c.lending_mode == "idle", 1), else_=0)))).one()
    busy = session.execute(select(func.count(func.distinct(job_assignments.c.node_id)))
                           .where(job_assignments.c.active.is_(True))).scalar_one()
    regions = session.execute(select(func.count(), func.max(node_regions.c.updated_at_ms))).one()
    pod_count = session.execute(select(func.count(), func.max(pods.c.declared_at_ms))).one()
    return tuple(int(value or 0) for value in (*counts, busy, *regions, *pod_count))


def _free_bytes():  # type: ignore[no-untyped-def]
    """(the join of nodes with their active reservations, free lendable memory per node).

    As placement counts it (job_rows._commitments): the weights and runtime a Mac's jobs of one
    model share are held once, however many of them run in its batch."""
    shared = job_assignments.c.shared_memory_bytes
    per_model = (select(job_assignments.c.node_id,
                        (func.sum(job_assignments.c.reserved_memory_bytes) - func.sum(shared) + func.max(shared))
                        .label("held"))
                 .join(jobs, jobs.c.job_id == job_assignments.c.job_id)
                 .where(job_assignments.c.active.is_(True))
                 .group_by(job_assignments.c.node_id, jobs.c.model_id).subquery())
    reserved = (select(per_model.c.node_id, func.sum(per_model.c.held).label("reserved"))
                .group_by(per_model.c.node_id).subquery())
    joined = nodes.outerjoin(reserved, reserved.c.node_id == nodes.c.node_id)
    return joined, _lendable() - func.coalesce(reserved.c.reserved, 0)


def _candidates(session: Session, live: Liveness) -> list[Candidate]:
    """The freest Mac, and every pod whose members are all online and accepting work."""
    accepting = and_(_online(live), nodes.c.accepting_jobs.is_(True))
    joined, free = _free_bytes()
    found: list[Candidate] = []
    best = session.execute(select(nodes.c.display_name, free).select_from(joined).where(accepting)
                           .order_by(free.desc(), nodes.c.node_id).limit(1)).first()
    if best is not None:
        found.append(Candidate(best[0], "mac", max(0, int(best[1]))))
    pod_list = pod_facts(session, PODS_READ_MAX)
    members = sorted({m for _, pod_members, _ in pod_list for m in pod_members})
    free_of: dict[str, int] = {}
    for start in range(0, len(members), IN_CHUNK):
        rows = session.execute(select(nodes.c.node_id, free).select_from(joined)
                               .where(accepting, nodes.c.node_id.in_(members[start:start + IN_CHUNK])))
        free_of.update({node_id: max(0, int(value)) for node_id, value in rows})
    for pod_id, pod_members, _ in pod_list:
        if all(member in free_of for member in pod_members):
            found.append(Candidate(f"pod {pod_id}", "pod", sum(free_of[m] for m in pod_members)))
    return found


def totals(session: Session, live: Liveness) -> Totals:
    online = _online(live)
    counts = session.execute(select(
        func.count(), func.sum(case((online, 1), else_=0)),
        func.sum(case((and_(online, nodes.c.accepting_jobs.is_(True)), _lendable()), else_=0)))).one()
    busy = session.execute(select(func.count()).where(online, _busy())).scalar_one()
    candidates = _candidates(session, live)
    since = live.now_ms - RATE_WINDOW_MS
    recent = session.execute(select(func.count(), func.sum(jobs.c.completion_tokens)).where(
        jobs.c.status == "completed", jobs.c.created_at_ms >= live.now_ms - RATE_CREATED_LOOKBACK_MS,
        jobs.c.finished_at_ms >= since)).one()
    paid_base_units, held_base_units = ledger.operator_credit_totals(session)
    return Totals(
        at_ms=live.now_ms, macs_total=int(counts[0]), macs_online=int(counts[1] or 0),
        macs_busy=int(busy), pods_online=sum(1 for c in candidates if c.kind == "pod"),
        memory_lendable_bytes=int(counts[2] or 0), largest=largest_candidate(candidates),
        jobs_last_minute=int(recent[0]), tokens_last_minute=int(recent[1] or 0),
        operator_paid_base_units=paid_base_units, operator_held_base_units=held_base_units)


def display_names(session: Session, node_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """node id -> (display name, chip), for a bounded set of ids."""
    wanted = sorted(set(node_ids))
    if not wanted:
        return {}
    rows = session.execute(select(nodes.c.node_id, nodes.c.display_name, nodes.c.chip)
                           .where(nodes.c.node_id.in_(wanted)))
    return {node_id: (name, chip) for node_id, name, chip in rows}


def epochs_version(session: Session) -> tuple[int, int]:
    """(the newest closed epoch or -1, how many roots were anchored): moves when an operator's page should."""
    return ledger.epochs_progress(session)


MAP_MACS_MAX = 50_000  # the map reads at most this many Macs per answer (it says when it stopped)


def map_rows(session: Session, query: FleetQuery, live: Liveness) -> tuple[list, set[str], dict[str, str]]:  # type: ignore[type-arg]
    """For the map: the filtered Macs' narrow rows (up to MAP_MACS_MAX + 1), the working ones'
    ids and each pod member's pod."""
    columns = (nodes.c.node_id, nodes.c.display_name, nodes.c.last_heartbeat_ms, nodes.c.left_at_ms,
               nodes.c.owner_active, node_regions.c.region)
    rows = session.execute(_with_regions(select(*columns)).where(*_filters(query, live))
                           .order_by(nodes.c.node_id).limit(MAP_MACS_MAX + 1)).all()
    working = set(session.execute(select(job_assignments.c.node_id).distinct()
                                  .where(job_assignments.c.active.is_(True))).scalars())
    return rows, working, pod_membership(session)
