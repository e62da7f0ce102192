"""Check records and node trust: the SQL edge of verification (tables from 0007_verification).

Like coordinator.storage.job_rows, everything takes the caller's session and never commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import (
    BigInteger, Boolean, bindparam, Column, Float, Index, Integer, MetaData, String, Table, Text, func,
    insert, select, update,
)
from sqlalchemy.orm import Session

from coordinator.verification.policy import TrustRecord

metadata = MetaData()

job_checks = Table(
    "job_checks", metadata,
    Column("job_id", String(64), primary_key=True),  # references jobs.job_id
    Column("node_id", String(64), nullable=False),
    Column("operator_id", String(128), nullable=False),
    Column("status", String(16), nullable=False),  # a CheckStatus (below)
    Column("check_rate", Float, nullable=False),
    Column("sampled", Boolean, nullable=False),
    Column("operator_credit", BigInteger, nullable=False),  # base units held for the operator
    Column("credit_state", String(16), nullable=False),  # pending/posted/voided (the held transfer)
    Column("hold_until_ms", BigInteger, nullable=False),  # the check window closes
    Column("reason", Text, nullable=True),  # one line: why unchecked, or why it failed
    Column("evidence_json", Text, nullable=True),  # the verdict in full
    Column("verifier", String(128), nullable=True),
    Column("verifier_attempts", Integer, nullable=False),
    Column("completed_at_ms", BigInteger, nullable=False),
    Column("checked_at_ms", BigInteger, nullable=True),
    Column("credit_resolved_at_ms", BigInteger, nullable=True),
    Column("rerun_job_id", String(64), nullable=True),
)
Index("ix_job_checks_status", job_checks.c.status, job_checks.c.completed_at_ms)
Index("ix_job_checks_credit", job_checks.c.credit_state, job_checks.c.hold_until_ms)
Index("ix_job_checks_node", job_checks.c.node_id, job_checks.c.completed_at_ms)
Index("ix_job_checks_rerun", job_checks.c.rerun_job_id)
Index("ix_job_checks_node_credit", job_checks.c.node_id, job_checks.c.credit_state)  # 0013: a node's stake

node_trust = Table(
    "node_trust", metadata,
    Column("node_id", String(64), primary_key=True),  # references nodes.node_id
    Column("checks_passed", Integer, nullable=False),
    Column("checks_failed", Integer, nullable=False),
    Column("passed_since_failure", Integer, nullable=True),  # null: never failed
    Column("quarantined_at_ms", BigInteger, nullable=True),
    Column("quarantine_reason", Text, nullable=True),
    Column("updated_at_ms", BigInteger, nullable=False),
)


class CheckStatus(StrEnum):
    WAITING = "waiting"  # sampled: the verifier will replay it
    PASSED = "passed"
    FAILED = "failed"
    UNCHECKED = "unchecked"  # not sampled: paid when its hold ends (longer when nobody can check it)
    PEER = "peer"  # sampled: a peer node replays it (verification/peer_checks.py); credit held
    # Its replay crashed or gave no verdict: never retried by that checker (not even at start-up),
    # escalated to another, and its credit stays held; "cannot check" is not "paid".
    QUARANTINED = "quarantined"
    # Sampled, but no checker could take it (no verifier holds its weights, and peer checks are
    # off or no peer came within the longer hold): held that long, then paid, the reason shown.
    AWAITING_CHECKER = "awaiting_checker"
    # Its credit was voided as stake when another job of its node failed a check: nothing to decide.
    FORFEITED = "forfeited"


class CreditState(StrEnum):
    PENDING = "pending"
    POSTED = "posted"
    VOIDED = "voided"


@dataclass(frozen=True)
class CheckRecord:
    job_id: str
    node_id: str
    operator_id: str
    status: CheckStatus
    check_rate: float
    sampled: bool
    operator_credit: int
    credit_state: CreditState
    hold_until_ms: int
    completed_at_ms: int
    reason: str | None = None
    evidence_json: str | None = None
    verifier: str | None = None
    verifier_attempts: int = 0
    checked_at_ms: int | None = None
    credit_resolved_at_ms: int | None = None
    rerun_job_id: str | None = None


@dataclass(frozen=True)
class NodeTrust:
    node_id: str
    record: TrustRecord
    quarantined_at_ms: int | None = None
    quarantine_reason: str | None = None


_FIELDS = tuple(c.name for c in job_checks.columns)


def _check_from_row(row) -> CheckRecord:  # type: ignore[no-untyped-def]
    values = {name: getattr(row, name) for name in _FIELDS}
    values["status"] = CheckStatus(values["status"])
    values["credit_state"] = CreditState(values["credit_state"])
    return CheckRecord(**values)


def insert_check(session: Session, check: CheckRecord) -> None:
    values = {name: getattr(check, name) for name in _FIELDS}
    values["status"], values["credit_state"] = check.status.value, check.credit_state.value
    session.execute(insert(job_checks).values(**values))


def check_by_job(session: Session, job_id: str, *, for_update: bool = False) -> CheckRecord | None:
    """for_update row-locks it on PostgreSQL, so two verifiers apply one verdict, not two."""
    query = select(job_checks).where(job_checks.c.job_id == job_id)
    row = session.execute(query.with_for_update() if for_update else query).first()
    return None if row is None else _check_from_row(row)


def waiting_checks(session: Session, limit: int) -> list[CheckRecord]:
    """Waiting checks whose replay has not started (see started_checks)."""
    rows = session.execute(select(job_checks).where(job_checks.c.status == CheckStatus.WAITING.value,
                                                    job_checks.c.verifier_attempts == 0)
                           .order_by(job_checks.c.completed_at_ms, job_checks.c.job_id).limit(limit))
    return [_check_from_row(r) for r in rows]


def started_checks(session: Session, started_before_ms: int, limit: int) -> list[CheckRecord]:
    """Waiting checks whose replay started before then and never gave a verdict: it crashed
    its process (or a whole coordinator), so it is not run again."""
    rows = session.execute(select(job_checks).where(
        job_checks.c.status == CheckStatus.WAITING.value, job_checks.c.verifier_attempts > 0,
        job_checks.c.checked_at_ms < started_before_ms).order_by(job_checks.c.job_id).limit(limit))
    return [_check_from_row(r) for r in rows]


_RELEASED_AT_HOLD_END = (CheckStatus.UNCHECKED.value, CheckStatus.AWAITING_CHECKER.value)


def due_credits(session: Session, now_ms: int, limit: int) -> list[CheckRecord]:
    """Unchecked (or never checkable) jobs whose hold has ended while their credit is still held."""
    rows = session.execute(select(job_checks).where(
        job_checks.c.credit_state == CreditState.PENDING.value,
        job_checks.c.status.in_(_RELEASED_AT_HOLD_END),
        job_checks.c.hold_until_ms <= now_ms).order_by(job_checks.c.hold_until_ms).limit(limit))
    return [_check_from_row(r) for r in rows]


def unclaimed_peer_checks(session: Session, completed_before_ms: int, limit: int) -> list[CheckRecord]:
    """Sampled jobs handed to peers, completed before then, their credit still held, that the
    coordinator's verifier never tried (escalated ones did): candidates for the longer hold's end."""
    rows = session.execute(select(job_checks).where(
        job_checks.c.status == CheckStatus.PEER.value, job_checks.c.completed_at_ms <= completed_before_ms,
        job_checks.c.credit_state == CreditState.PENDING.value, job_checks.c.verifier_attempts == 0)
        .order_by(job_checks.c.completed_at_ms).limit(limit))
    return [_check_from_row(r) for r in rows]


def checks_for_node(session: Session, node_id: str, limit: int) -> list[CheckRecord]:
    rows = session.execute(select(job_checks).where(job_checks.c.node_id == node_id)
                           .order_by(job_checks.c.completed_at_ms.desc()).limit(limit))
    return [_check_from_row(r) for r in rows]


def update_check(session: Session, job_id: str, from_statuses: frozenset[CheckStatus],
                 **values: object) -> bool:
    """Compare-and-set on status: True only for the one caller that moved the check."""
    for name in ("status", "credit_state"):
        if name in values:
            values[name] = str(values[name])
    result = session.execute(update(job_checks).where(
        job_checks.c.job_id == job_id,
        job_checks.c.status.in_([s.value for s in from_statuses])).values(**values))
    return result.rowcount == 1


def node_exposure(session: Session, node_id: str, window_start_ms: int) -> tuple[int, int]:
    """(credits the node still has held, its jobs completed since window_start_ms): its stake
    and its pace, read when one of its jobs completes (economics.Exposure)."""
    held = select(func.coalesce(func.sum(job_checks.c.operator_credit), 0)).where(
        job_checks.c.node_id == node_id, job_checks.c.credit_state == CreditState.PENDING.value).scalar_subquery()
    recent = select(func.count()).select_from(job_checks).where(
        job_checks.c.node_id == node_id, job_checks.c.completed_at_ms >= window_start_ms).scalar_subquery()
    held_credit, jobs_in_window = session.execute(select(held, recent)).one()  # one round trip per receipt
    return int(held_credit), int(jobs_in_window)


def held_checks(session: Session, node_id: str, except_job_id: str) -> list[CheckRecord]:
    """The node's other jobs whose credit is still held, newest first (the stake a failure takes)."""
    rows = session.execute(select(job_checks).where(
        job_checks.c.node_id == node_id, job_checks.c.credit_state == CreditState.PENDING.value,
        job_checks.c.job_id != except_job_id)
        .order_by(job_checks.c.completed_at_ms.desc(), job_checks.c.job_id))
    return [_check_from_row(r) for r in rows]


def posted_credit_since(session: Session, node_id: str, since_ms: int) -> int:
    """Base units posted to the node for jobs completed since then (what a claw-back reaches)."""
    return int(session.execute(select(func.coalesce(func.sum(job_checks.c.operator_credit), 0)).where(
        job_checks.c.node_id == node_id, job_checks.c.credit_state == CreditState.POSTED.value,
        job_checks.c.completed_at_ms >= since_ms)).scalar_one())


def audit_unchecked(session: Session, node_id: str) -> list[str]:
    """Turn a node's unchecked, still-held jobs into waiting checks (after it failed one)."""
    job_ids = session.execute(select(job_checks.c.job_id).where(
        job_checks.c.node_id == node_id, job_checks.c.status == CheckStatus.UNCHECKED.value,
        job_checks.c.credit_state == CreditState.PENDING.value)).scalars().all()
    for job_id in job_ids:
        update_check(session, job_id, frozenset({CheckStatus.UNCHECKED}), status=CheckStatus.WAITING,
                     sampled=True, reason="audited: the node failed another check")
    return list(job_ids)


def excluded_nodes(session: Session, job_ids: list[str]) -> dict[str, frozenset[str]]:
    """job id -> nodes that must not run it, for the jobs that re-run a job those nodes failed."""
    excluded: dict[str, set[str]] = {}
    for start in range(0, len(job_ids), 500):
        rows = session.execute(select(job_checks.c.rerun_job_id, job_checks.c.node_id).where(
            job_checks.c.rerun_job_id.in_(job_ids[start:start + 500])))
        for rerun_job_id, node_id in rows:
            excluded.setdefault(rerun_job_id, set()).add(node_id)
    return {job_id: frozenset(nodes) for job_id, nodes in excluded.items()}


# --- trust -----------------------------------------------------------------------

def _trust_from_row(row) -> NodeTrust:  # type: ignore[no-untyped-def]
    return NodeTrust(row.node_id, TrustRecord(row.checks_passed, row.checks_failed,
                                              row.passed_since_failure),
                     row.quarantined_at_ms, row.quarantine_reason)


def node_trust_of(session: Session, node_id: str, *, for_update: bool = False) -> NodeTrust:
    query = select(node_trust).where(node_trust.c.node_id == node_id)
    row = session.execute(query.with_for_update() if for_update else query).first()
    return NodeTrust(node_id, TrustRecord()) if row is None else _trust_from_row(row)


_ALL_TRUST = select(node_trust)  # built once: every submit reads it (see coordinator.storage.job_rows)


def all_node_trust(session: Session) -> dict[str, NodeTrust]:
    return {row.node_id: _trust_from_row(row) for row in session.execute(_ALL_TRUST)}


_TRUST_OF_NODES = select(node_trust).where(node_trust.c.node_id.in_(bindparam("node_ids", expanding=True)))


_TRUST_OF_NODE = select(node_trust).where(node_trust.c.node_id == bindparam("node_id"))


def trust_of_nodes(session: Session, node_ids: list[str]) -> dict[str, NodeTrust]:
    """all_node_trust for just these nodes (nodes never checked have no row)."""
    if len(node_ids) == 1:  # a submit's one chosen Mac: a plain parameter, not an expanding list
        return {row.node_id: _trust_from_row(row)
                for row in session.execute(_TRUST_OF_NODE, {"node_id": node_ids[0]})}
    found: dict[str, NodeTrust] = {}
    for start in range(0, len(node_ids), 500):
        rows = session.execute(_TRUST_OF_NODES, {"node_ids": node_ids[start:start + 500]})
        found.update({row.node_id: _trust_from_row(row) for row in rows})
    return found


def save_node_trust(session: Session, trust: NodeTrust, now_ms: int) -> None:
    values = dict(checks_passed=trust.record.checks_passed, checks_failed=trust.record.checks_failed,
                  passed_since_failure=trust.record.passed_since_failure,
                  quarantined_at_ms=trust.quarantined_at_ms,
                  quarantine_reason=trust.quarantine_reason, updated_at_ms=now_ms)
    moved = session.execute(update(node_trust).where(node_trust.c.node_id == trust.node_id)
                            .values(**values)).rowcount
    if moved == 0:
        session.execute(insert(node_trust).values(node_id=trust.node_id, **values))
