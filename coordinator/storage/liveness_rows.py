"""Liveness rows: node leases written in batches, uptime spans, and the reaper's narrow reads.

Every function takes the caller's session and never commits.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from contracts.lending import LendingMode
from coordinator.model import JobStatus, LeaseWrite, UptimeSpan
from coordinator.storage.tables import job_assignments, jobs, node_heartbeats, node_uptime_spans, nodes

# A lease only moves forward: another coordinator may have written a newer one.
_WRITE_LEASE = (update(nodes).where(nodes.c.node_id == bindparam("b_node_id"),
                                    nodes.c.last_heartbeat_ms <= bindparam("b_last"))
                .values(last_heartbeat_ms=bindparam("b_last"),
                        running_jobs_reported=bindparam("b_running")))
_INSERT_SPAN = insert(node_uptime_spans)
_UPDATE_SPAN = (update(node_uptime_spans)
                .where(node_uptime_spans.c.node_id == bindparam("b_node_id"),
                       node_uptime_spans.c.first_received_ms == bindparam("b_first"))
                .values(last_received_ms=bindparam("b_last"), last_sent_at_ms=bindparam("b_last_sent"),
                        beats=bindparam("b_beats"), last_signature=bindparam("b_signature")))


def write_leases(session: Session, writes: Sequence[LeaseWrite]) -> None:
    """One batch of lease rows, as one executemany."""
    if writes:
        session.execute(_WRITE_LEASE, [
            {"b_node_id": w.node_id, "b_last": w.last_heartbeat_ms, "b_running": w.running_jobs}
            for w in writes])


def save_spans(session: Session, spans: Sequence[tuple[UptimeSpan, bool]]) -> None:
    """Insert new spans and update grown ones (each with whether its row exists)."""
    new = [span for span, exists in spans if not exists]
    grown = [span for span, exists in spans if exists]
    if new:
        session.execute(_INSERT_SPAN, [dict(
            node_id=s.node_id, first_received_ms=s.first_received_ms,
            last_received_ms=s.last_received_ms, mode=s.mode, first_sent_at_ms=s.first_sent_at_ms,
            last_sent_at_ms=s.last_sent_at_ms, beats=s.beats, first_signature=s.first_signature,
            last_signature=s.last_signature) for s in new])
    if grown:
        session.execute(_UPDATE_SPAN, [dict(
            b_node_id=s.node_id, b_first=s.first_received_ms, b_last=s.last_received_ms,
            b_last_sent=s.last_sent_at_ms, b_beats=s.beats, b_signature=s.last_signature)
            for s in grown])


def _span_from_row(row) -> UptimeSpan:  # type: ignore[no-untyped-def]
    return UptimeSpan(row.node_id, row.mode, row.first_received_ms, row.last_received_ms,
                      row.first_sent_at_ms, row.last_sent_at_ms, row.beats, row.first_signature,
                      row.last_signature)


def latest_span(session: Session, node_id: str) -> tuple[UptimeSpan | None, int | None]:
    """The node's latest stored span, and the newest signed time stored for it anywhere."""
    row = session.execute(select(node_uptime_spans).where(node_uptime_spans.c.node_id == node_id)
                          .order_by(node_uptime_spans.c.last_received_ms.desc()).limit(1)).first()
    older = session.execute(select(func.max(node_heartbeats.c.sent_at_ms))
                            .where(node_heartbeats.c.node_id == node_id)).scalar_one()
    span = None if row is None else _span_from_row(row)
    newest = max((t for t in (older, span.last_sent_at_ms if span else None) if t is not None),
                 default=None)
    return span, newest


def spans(session: Session, node_id: str, since_ms: int, until_ms: int,
          modes: frozenset[LendingMode] | None = None) -> list[UptimeSpan]:
    """The node's spans that overlap [since_ms, until_ms), oldest first."""
    query = (select(node_uptime_spans)
             .where(node_uptime_spans.c.node_id == node_id,
                    node_uptime_spans.c.last_received_ms >= since_ms,
                    node_uptime_spans.c.first_received_ms < until_ms)
             .order_by(node_uptime_spans.c.first_received_ms))
    if modes is not None:
        query = query.where(node_uptime_spans.c.mode.in_([mode.value for mode in modes]))
    return [_span_from_row(r) for r in session.execute(query)]


def proof_times(session: Session, node_id: str, since_ms: int, until_ms: int, credit_ms: int,
                modes: frozenset[LendingMode] | None = None) -> list[int]:
    """Times whose credits cover what the node's signed heartbeats prove in [since_ms, until_ms):
    its spans' (UptimeSpan.credit_times) and its older one-row-per-heartbeat times."""
    older = select(node_heartbeats.c.received_at_ms).where(
        node_heartbeats.c.node_id == node_id, node_heartbeats.c.received_at_ms >= since_ms,
        node_heartbeats.c.received_at_ms < until_ms)
    if modes is not None:
        older = older.where(node_heartbeats.c.mode.in_([mode.value for mode in modes]))
    times = [int(t) for t in session.execute(older).scalars()]
    for span in spans(session, node_id, since_ms - credit_ms, until_ms, modes):
        times += [t for t in span.credit_times(credit_ms, since_ms, until_ms) if t < until_ms]
    return sorted(times)


def prune_spans(session: Session, before_ms: int) -> int:
    """Drop spans that ended before before_ms (older than any open epoch); returns how many."""
    return session.execute(node_uptime_spans.delete().where(
        node_uptime_spans.c.last_received_ms < before_ms)).rowcount


_OLDEST_LEASE = select(func.min(nodes.c.last_heartbeat_ms)).where(nodes.c.left_at_ms.is_(None))


def oldest_lease(session: Session) -> int | None:
    """The oldest lease of a node that has not left (None: none): no node can expire before it
    (leases only move forward), so the reaper need not look again until then."""
    return session.execute(_OLDEST_LEASE).scalar_one()


_STALE_HOLDING_JOBS_AMONG = (
    select(job_assignments.c.node_id).distinct()
    .join(nodes, nodes.c.node_id == job_assignments.c.node_id)
    .where(job_assignments.c.active.is_(True),
           job_assignments.c.node_id.in_(bindparam("node_ids", expanding=True)),
           nodes.c.last_heartbeat_ms < bindparam("before_ms"))
    .order_by(job_assignments.c.node_id))


def stale_holding_jobs_among(session: Session, node_ids: Sequence[str], before_ms: int) -> list[str]:
    """Of these nodes, those that hold jobs and whose stored lease is older than before_ms (no
    coordinator renewed it): one statement per 500 nodes, whatever most of them hold."""
    found: list[str] = []
    for start in range(0, len(node_ids), 500):
        found += session.execute(_STALE_HOLDING_JOBS_AMONG, {
            "node_ids": list(node_ids[start:start + 500]), "before_ms": before_ms}).scalars()
    return found


_NODES_WITH_UNSENT_JOBS = (
    select(job_assignments.c.node_id).distinct()
    .join(jobs, jobs.c.job_id == job_assignments.c.job_id)
    .where(job_assignments.c.active.is_(True), jobs.c.status == JobStatus.ASSIGNED.value)
    .order_by(job_assignments.c.node_id).limit(bindparam("limit")))


def nodes_with_unstarted_jobs(session: Session, limit: int) -> list[str]:
    """Nodes holding jobs assigned and not yet started: the streams' safety net (one read)."""
    return list(session.execute(_NODES_WITH_UNSENT_JOBS, {"limit": limit}).scalars())
