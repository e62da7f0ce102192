"""Challenge benchmark rows (coordinator/nodes/spot_benchmarks.py): issued, sent once, answered once."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from coordinator.model import CHALLENGE_PASSED, SpotChallenge
from coordinator.storage.tables import node_benchmarks, node_challenges, nodes


def _challenge_from_row(row) -> SpotChallenge:  # type: ignore[no-untyped-def]
    return SpotChallenge(
        challenge_id=row.challenge_id, node_id=row.node_id, model_id=row.model_id, prompt=row.prompt,
        seed=row.seed, decode_tokens=row.decode_tokens, issued_at_ms=row.issued_at_ms,
        claimed_tokens_per_s=row.claimed_tokens_per_s, sent_at_ms=row.sent_at_ms)


def candidates(session: Session, heard_since_ms: int) -> list[tuple[str, str, float, bool]]:
    """(node id, reference model, claimed decode tok/s, never judged) of every Mac whose latest
    self-benchmark fits its chip, heard from since heard_since_ms, with no challenge open (one
    unanswered, or answered and not replayed yet)."""
    latest = (select(node_benchmarks.c.node_id, func.max(node_benchmarks.c.measured_at_ms).label("at"))
              .group_by(node_benchmarks.c.node_id).subquery())
    open_challenges = select(node_challenges.c.node_id).where(node_challenges.c.outcome.is_(None))
    rows = session.execute(
        select(nodes.c.node_id, node_benchmarks.c.reference_model, node_benchmarks.c.decode_tokens_per_s,
               nodes.c.challenge_flag, nodes.c.challenge_passed_at_ms)
        .join(latest, latest.c.node_id == nodes.c.node_id)
        .join(node_benchmarks, (node_benchmarks.c.node_id == latest.c.node_id)
              & (node_benchmarks.c.measured_at_ms == latest.c.at))
        .where(nodes.c.benchmark_flag.is_(None), nodes.c.measured_bandwidth_gb_s.is_not(None),
               nodes.c.left_at_ms.is_(None), nodes.c.last_heartbeat_ms >= heard_since_ms,
               nodes.c.node_id.not_in(open_challenges))
        .order_by(nodes.c.node_id))
    return [(row.node_id, row.reference_model, float(row.decode_tokens_per_s),
             row.challenge_flag is None and row.challenge_passed_at_ms is None) for row in rows]


def add(session: Session, challenge: SpotChallenge) -> None:
    session.execute(insert(node_challenges).values(
        challenge_id=challenge.challenge_id, node_id=challenge.node_id, model_id=challenge.model_id,
        prompt=challenge.prompt, seed=challenge.seed, decode_tokens=challenge.decode_tokens,
        claimed_tokens_per_s=challenge.claimed_tokens_per_s, issued_at_ms=challenge.issued_at_ms,
        sent_at_ms=None, answered_at_ms=None, outcome=None))


def unsent_for_node(session: Session, node_id: str) -> list[SpotChallenge]:
    rows = session.execute(select(node_challenges).where(
        node_challenges.c.node_id == node_id, node_challenges.c.sent_at_ms.is_(None))
        .order_by(node_challenges.c.issued_at_ms))
    return [_challenge_from_row(row) for row in rows]


def mark_sent(session: Session, challenge_id: str, now_ms: int) -> bool:
    """The clock starts now; False when another stream sent it first."""
    return session.execute(update(node_challenges).where(
        node_challenges.c.challenge_id == challenge_id, node_challenges.c.sent_at_ms.is_(None))
        .values(sent_at_ms=now_ms)).rowcount == 1


def by_id(session: Session, challenge_id: str) -> SpotChallenge | None:
    row = session.execute(select(node_challenges).where(
        node_challenges.c.challenge_id == challenge_id, node_challenges.c.answered_at_ms.is_(None))).first()
    return _challenge_from_row(row) if row is not None else None


def fail(session: Session, challenge: SpotChallenge, answered_at_ms: int, problem: str) -> bool:
    """Record a failed answer (or none) once: the node's hardware is only claimed again."""
    done = session.execute(update(node_challenges).where(
        node_challenges.c.challenge_id == challenge.challenge_id, node_challenges.c.answered_at_ms.is_(None))
        .values(answered_at_ms=answered_at_ms, outcome=problem)).rowcount == 1
    if done:
        _flag(session, challenge.node_id, problem, answered_at_ms)
    return done


def _flag(session: Session, node_id: str, problem: str | None, now_ms: int) -> None:
    """Set the node's challenge flag, or clear it and note the pass."""
    values = ({"challenge_flag": problem, "challenge_passed_at_ms": None} if problem is not None
              else {"challenge_flag": None, "challenge_passed_at_ms": now_ms})
    session.execute(update(nodes).where(nodes.c.node_id == node_id).values(**values))


def await_replay(session: Session, challenge: SpotChallenge, answered_at_ms: int, receipt_body: bytes,
                 receipt_signature: bytes, token_ids: tuple[int, ...]) -> bool:
    """Keep an answer that fit in time, once, for its replay: no outcome until then."""
    return session.execute(update(node_challenges).where(
        node_challenges.c.challenge_id == challenge.challenge_id, node_challenges.c.answered_at_ms.is_(None))
        .values(answered_at_ms=answered_at_ms, receipt_body=receipt_body,
                receipt_signature=receipt_signature, token_ids=pack_token_ids(token_ids))).rowcount == 1


@dataclass(frozen=True)
class AnsweredChallenge:
    challenge: SpotChallenge
    receipt_body: bytes
    token_ids: tuple[int, ...]
    answered_at_ms: int


def awaiting_replay(session: Session, limit: int) -> list[AnsweredChallenge]:
    rows = session.execute(select(node_challenges).where(
        node_challenges.c.answered_at_ms.is_not(None), node_challenges.c.outcome.is_(None),
        node_challenges.c.receipt_body.is_not(None))
        .order_by(node_challenges.c.answered_at_ms).limit(limit))
    return [AnsweredChallenge(_challenge_from_row(row), row.receipt_body, unpack_token_ids(row.token_ids),
                              row.answered_at_ms) for row in rows]


def record_replay(session: Session, challenge: SpotChallenge, problem: str | None, now_ms: int) -> bool:
    """The replay's verdict, once: "passed" clears the node's flag and notes the pass."""
    done = session.execute(update(node_challenges).where(
        node_challenges.c.challenge_id == challenge.challenge_id, node_challenges.c.outcome.is_(None),
        node_challenges.c.answered_at_ms.is_not(None))
        .values(outcome=problem or CHALLENGE_PASSED)).rowcount == 1
    if done:
        _flag(session, challenge.node_id, problem, now_ms)
    return done


def pack_token_ids(token_ids: tuple[int, ...]) -> bytes:
    return b"".join(struct.pack(">I", token) for token in token_ids)


def unpack_token_ids(data: bytes) -> tuple[int, ...]:
    assert len(data) % 4 == 0, "token ids are stored as u32s"
    return tuple(token for (token,) in struct.iter_unpack(">I", data))


def overdue(session: Session, sent_before_ms: int) -> list[SpotChallenge]:
    rows = session.execute(select(node_challenges).where(
        node_challenges.c.answered_at_ms.is_(None), node_challenges.c.sent_at_ms < sent_before_ms))
    return [_challenge_from_row(row) for row in rows]


def outcomes(session: Session, node_id: str) -> list[tuple[str, str | None]]:
    """(challenge id, outcome) of the node's challenges, oldest first (None: still open)."""
    rows = session.execute(select(node_challenges.c.challenge_id, node_challenges.c.outcome)
                           .where(node_challenges.c.node_id == node_id)
                           .order_by(node_challenges.c.issued_at_ms))
    return [(row.challenge_id, row.outcome) for row in rows]


def drop_undelivered(session: Session, issued_before_ms: int, now_ms: int) -> int:
    """Close challenges never sent (the node's stream was down): no verdict either way."""
    return session.execute(update(node_challenges).where(
        node_challenges.c.sent_at_ms.is_(None), node_challenges.c.answered_at_ms.is_(None),
        node_challenges.c.issued_at_ms < issued_before_ms)
        .values(answered_at_ms=now_ms, outcome="not delivered")).rowcount
