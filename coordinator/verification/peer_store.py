"""Check jobs run by peers: the SQL edge (table from 0013_peercheck_peer_checks).

One row per check job: a sampled job's first replay by a peer (role "check") or a dispute's
referee ("referee"), each asked of one node at a time. A row is waiting (no peer eligible
yet), assigned (sent in its checker's assignment stream), answered (its signed result
judged), or lapsed (the checker missed the deadline or could not replay; another peer is
asked). Like store.py, everything takes the caller's session and never commits.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import (
    BigInteger, Boolean, Column, Index, Integer, LargeBinary, String, Table, Text, func, insert, or_, select, update,
)
from sqlalchemy.orm import Session

from coordinator.storage.tables import jobs
from coordinator.verification.peers import Pairing, Role
from coordinator.verification.store import CreditState, job_checks, metadata

peer_checks = Table(
    "peer_checks", metadata,
    Column("check_id", String(64), primary_key=True),
    Column("job_id", String(64), nullable=False),  # the checked job (job_checks.job_id)
    Column("role", String(16), nullable=False),  # check/referee
    Column("attempt", Integer, nullable=False),  # 1.. per role: a lapsed check is asked again
    Column("checked_node_id", String(64), nullable=False),
    Column("checked_operator_id", String(128), nullable=False),
    Column("checker_node_id", String(64), nullable=True),  # null while waiting for a peer
    Column("checker_operator_id", String(128), nullable=True),
    Column("status", String(16), nullable=False),  # waiting/assigned/answered/lapsed
    Column("created_at_ms", BigInteger, nullable=False),
    Column("assigned_at_ms", BigInteger, nullable=True),
    Column("deadline_ms", BigInteger, nullable=True),
    Column("answered_at_ms", BigInteger, nullable=True),
    Column("passed", Boolean, nullable=True),  # the checker's verdict on the job
    Column("reason", Text, nullable=True),  # why waiting or lapsed, or the verdict in one line
    Column("evidence_json", Text, nullable=True),
    Column("result_body", LargeBinary, nullable=True),  # the signed result, as received
    Column("result_signature", LargeBinary, nullable=True),
    Column("fee_base_units", BigInteger, nullable=False),  # paid to the checker's operator
    Column("fee_transfer_id", String(128), nullable=True),  # the ledger transfer that paid it
    # A planted check (0018_peers2_planted_checks): the verified job whose prompt and output it
    # reuses, and the tampered receipt it is judged against. Null for a real check.
    Column("planted_from_job_id", String(64), nullable=True),
    Column("claim_body", LargeBinary, nullable=True),
    Column("fee_taken_back_by", String(64), nullable=True),  # the planted check that caught its checker
)
Index("ix_peer_checks_checker", peer_checks.c.checker_node_id, peer_checks.c.status)
Index("ix_peer_checks_job", peer_checks.c.job_id)
Index("ix_peer_checks_status", peer_checks.c.status, peer_checks.c.deadline_ms)
Index("ix_peer_checks_pairs", peer_checks.c.assigned_at_ms)
# Answered checks newest first (planting_sources, beside every check): without it each planting
# sorted every check ever answered.
Index("ix_peer_checks_answered", peer_checks.c.status, peer_checks.c.answered_at_ms, peer_checks.c.check_id)


class PeerCheckStatus(StrEnum):
    WAITING = "waiting"
    ASSIGNED = "assigned"
    ANSWERED = "answered"
    LAPSED = "lapsed"


@dataclass(frozen=True)
class PeerCheckRecord:
    check_id: str
    job_id: str
    role: Role
    attempt: int
    checked_node_id: str
    checked_operator_id: str
    status: PeerCheckStatus
    created_at_ms: int
    checker_node_id: str | None = None
    checker_operator_id: str | None = None
    assigned_at_ms: int | None = None
    deadline_ms: int | None = None
    answered_at_ms: int | None = None
    passed: bool | None = None
    reason: str | None = None
    evidence_json: str | None = None
    result_body: bytes | None = None
    result_signature: bytes | None = None
    fee_base_units: int = 0
    fee_transfer_id: str | None = None
    planted_from_job_id: str | None = None
    claim_body: bytes | None = None
    fee_taken_back_by: str | None = None

    @property
    def planted(self) -> bool:
        return self.planted_from_job_id is not None


_FIELDS = tuple(c.name for c in peer_checks.columns)


def check_id_for(job_id: str, role: Role, attempt: int) -> str:
    digest = hashlib.sha256(f"mlxnet.peer-check\x00{job_id}\x00{role}\x00{attempt}".encode()).hexdigest()
    return f"pc_{digest[:32]}"


def _from_row(row) -> PeerCheckRecord:  # type: ignore[no-untyped-def]
    values = {name: getattr(row, name) for name in _FIELDS}
    values["role"], values["status"] = Role(values["role"]), PeerCheckStatus(values["status"])
    return PeerCheckRecord(**values)


def insert_peer_check(session: Session, check: PeerCheckRecord) -> None:
    values = {name: getattr(check, name) for name in _FIELDS}
    values["role"], values["status"] = check.role.value, check.status.value
    session.execute(insert(peer_checks).values(**values))


def peer_check(session: Session, check_id: str, *, for_update: bool = False) -> PeerCheckRecord | None:
    query = select(peer_checks).where(peer_checks.c.check_id == check_id)
    row = session.execute(query.with_for_update() if for_update else query).first()
    return None if row is None else _from_row(row)


def of_job(session: Session, job_id: str) -> list[PeerCheckRecord]:
    rows = session.execute(select(peer_checks).where(peer_checks.c.job_id == job_id)
                           .order_by(peer_checks.c.created_at_ms, peer_checks.c.check_id))
    return [_from_row(r) for r in rows]


def with_status(session: Session, status: PeerCheckStatus, limit: int) -> list[PeerCheckRecord]:
    rows = session.execute(select(peer_checks).where(peer_checks.c.status == status.value)
                           .order_by(peer_checks.c.created_at_ms, peer_checks.c.check_id).limit(limit))
    return [_from_row(r) for r in rows]


def overdue(session: Session, now_ms: int, limit: int) -> list[PeerCheckRecord]:
    rows = session.execute(select(peer_checks).where(
        peer_checks.c.status == PeerCheckStatus.ASSIGNED.value, peer_checks.c.deadline_ms < now_ms)
        .order_by(peer_checks.c.deadline_ms).limit(limit))
    return [_from_row(r) for r in rows]


def assigned_to(session: Session, node_id: str, limit: int) -> list[PeerCheckRecord]:
    rows = session.execute(select(peer_checks).where(
        peer_checks.c.checker_node_id == node_id, peer_checks.c.status == PeerCheckStatus.ASSIGNED.value)
        .order_by(peer_checks.c.assigned_at_ms, peer_checks.c.check_id).limit(limit))
    return [_from_row(r) for r in rows]


def recent_pairings(session: Session, limit: int) -> list[Pairing]:
    """The latest peer checks' pairs, newest first (what checker selection remembers)."""
    rows = session.execute(select(peer_checks.c.checked_node_id, peer_checks.c.checker_node_id,
                                  peer_checks.c.assigned_at_ms)
                           .where(peer_checks.c.assigned_at_ms.is_not(None),
                                  peer_checks.c.planted_from_job_id.is_(None))  # no real partner
                           .order_by(peer_checks.c.assigned_at_ms.desc()).limit(limit))
    return [Pairing(checked, checker, at_ms) for checked, checker, at_ms in rows]


def planting_sources(session: Session, limit: int) -> list[tuple[PeerCheckRecord, bytes | None]]:
    """The latest real checks a peer passed and the ruling kept (their replays are what a
    planted check is built from), newest first, each with its job's receipt (None: none kept),
    read in the same statement rather than one job at a time."""
    rows = session.execute(select(peer_checks, jobs.c.receipt_body.label("source_receipt_body"))
                           .select_from(peer_checks.outerjoin(jobs, jobs.c.job_id == peer_checks.c.job_id))
                           .where(peer_checks.c.status == PeerCheckStatus.ANSWERED.value,
                                  peer_checks.c.role == Role.CHECK.value, peer_checks.c.passed.is_(True),
                                  peer_checks.c.planted_from_job_id.is_(None))
                           .order_by(peer_checks.c.answered_at_ms.desc(), peer_checks.c.check_id).limit(limit))
    return [(_from_row(r), r.source_receipt_body) for r in rows]


def checked_by(session: Session, node_id: str, job_ids: list[str]) -> frozenset[str]:
    """Which of these jobs the node was ever sent: to check, to referee, or as a planted check's source."""
    if not job_ids:
        return frozenset()
    rows = session.execute(select(peer_checks.c.job_id, peer_checks.c.planted_from_job_id).where(
        peer_checks.c.checker_node_id == node_id,
        or_(peer_checks.c.job_id.in_(job_ids), peer_checks.c.planted_from_job_id.in_(job_ids))))
    return frozenset(job_id for row in rows for job_id in row if job_id in job_ids)


def _fees_kept(node_id: str, since_ms: int):  # type: ignore[no-untyped-def]
    return (peer_checks.c.checker_node_id == node_id, peer_checks.c.fee_transfer_id.is_not(None),
            peer_checks.c.fee_taken_back_by.is_(None), peer_checks.c.answered_at_ms >= since_ms)


def fees_paid_since(session: Session, node_id: str, since_ms: int) -> int:
    """Base units paid for the node's checks answered since then and not taken back (what a caught
    checker gives back)."""
    return int(session.execute(select(func.coalesce(func.sum(peer_checks.c.fee_base_units), 0))
                               .where(*_fees_kept(node_id, since_ms))).scalar_one())


def _credit_sum(node_id: str, *conditions):  # type: ignore[no-untyped-def]
    return select(func.coalesce(func.sum(job_checks.c.operator_credit), 0)).where(
        job_checks.c.node_id == node_id, *conditions).scalar_subquery()


def checker_stake(session: Session, node_id: str, since_ms: int) -> tuple[int, int, int]:
    """(fees_paid_since, its credits still held, store.posted_credit_since): what a checker caught
    by a planted check loses, in one statement; planting read them in four, beside every check."""
    fees = select(func.coalesce(func.sum(peer_checks.c.fee_base_units), 0)).where(
        *_fees_kept(node_id, since_ms)).scalar_subquery()
    held = _credit_sum(node_id, job_checks.c.credit_state == CreditState.PENDING.value)
    posted = _credit_sum(node_id, job_checks.c.credit_state == CreditState.POSTED.value,
                         job_checks.c.completed_at_ms >= since_ms)
    fees_paid, held_credit, posted_credit = session.execute(select(fees, held, posted)).one()
    return int(fees_paid), int(held_credit), int(posted_credit)


def take_back_fees(session: Session, node_id: str, since_ms: int, by_check_id: str) -> int:
    """Mark the node's fees since then as taken back by that planted check; their base units."""
    amount = fees_paid_since(session, node_id, since_ms)
    session.execute(update(peer_checks).where(*_fees_kept(node_id, since_ms)).values(fee_taken_back_by=by_check_id))
    return amount


def caught_since(session: Session, node_id: str, since_ms: int) -> bool:
    """Whether the node passed a planted claim (was caught being lazy) in an answer since then."""
    return session.execute(select(peer_checks.c.check_id).where(
        peer_checks.c.checker_node_id == node_id, peer_checks.c.planted_from_job_id.is_not(None),
        peer_checks.c.status == PeerCheckStatus.ANSWERED.value, peer_checks.c.passed.is_(True),
        peer_checks.c.answered_at_ms >= since_ms).limit(1)).first() is not None


def planted_answered_by(session: Session, node_id: str, limit: int) -> list[PeerCheckRecord]:
    """The planted checks a node answered, newest first (an auditor's view of its diligence)."""
    rows = session.execute(select(peer_checks).where(
        peer_checks.c.checker_node_id == node_id, peer_checks.c.planted_from_job_id.is_not(None),
        peer_checks.c.status == PeerCheckStatus.ANSWERED.value)
        .order_by(peer_checks.c.answered_at_ms.desc(), peer_checks.c.check_id).limit(limit))
    return [_from_row(r) for r in rows]


def update_peer_check(session: Session, check_id: str, from_statuses: frozenset[PeerCheckStatus],
                      **values: object) -> bool:
    """Compare-and-set on status: True only for the one caller that moved the row."""
    if "status" in values:
        values["status"] = str(values["status"])
    result = session.execute(update(peer_checks).where(
        peer_checks.c.check_id == check_id,
        peer_checks.c.status.in_([s.value for s in from_statuses])).values(**values))
    return result.rowcount == 1
