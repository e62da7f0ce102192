"""The SQL shell for queued completions (ledger.posting_queue), through the caller's Session.

Rows are read only by a caller that holds the chain-head lock, so two posters never read
the same row: the one that waited sees the other's deletions once it has the lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import Row, bindparam, delete, func, insert, select, update
from sqlalchemy.orm import Session

from ledger.storage import tables
from ledger.storage.among import among, json_ids

_QUEUE = tables.queued_postings
_COLUMNS = ("job_id", "consumer_id", "operator_id", "consumer_charge", "operator_credit", "network_fee",
            "policy_version", "hold_s", "queued_at_us")
_INSERT = insert(_QUEUE)
_OLDEST = (select(*(_QUEUE.c[name] for name in _COLUMNS)).where(_QUEUE.c.failed_code.is_(None))
           .order_by(_QUEUE.c.queued_at_us, _QUEUE.c.job_id).limit(bindparam("limit")))
_OF_JOBS = (select(*(_QUEUE.c[name] for name in _COLUMNS))
            .where(among(_QUEUE.c.job_id), _QUEUE.c.failed_code.is_(None))
            .order_by(_QUEUE.c.queued_at_us, _QUEUE.c.job_id))
_DELETE = delete(_QUEUE).where(among(_QUEUE.c.job_id))
_REFUSE = update(_QUEUE).where(_QUEUE.c.job_id == bindparam("refused_job_id")).values(
    failed_code=bindparam("code"))
_COUNTS = select(func.count(), func.count(_QUEUE.c.failed_code), func.min(_QUEUE.c.queued_at_us))
_REFUSED = select(_QUEUE.c.job_id, _QUEUE.c.failed_code).where(_QUEUE.c.failed_code.is_not(None)).order_by(
    _QUEUE.c.job_id).limit(bindparam("limit"))


def insert_row(session: Session, values: dict[str, Any]) -> None:
    session.execute(_INSERT, values)


def queued_rows(session: Session, job_ids: Iterable[str] | None, limit: int) -> Sequence[Row]:
    """Unrefused rows, oldest first: all of these jobs' (job_ids), or the `limit` oldest."""
    if job_ids is None:
        return session.execute(_OLDEST, {"limit": limit}).all()
    ids = json_ids(job_ids)
    return () if ids == "[]" else session.execute(_OF_JOBS, {"among": ids}).all()


def delete_rows(session: Session, job_ids: Iterable[str]) -> None:
    ids = json_ids(job_ids)
    if ids != "[]":
        session.execute(_DELETE, {"among": ids})


def refuse_rows(session: Session, refused: Sequence[tuple[str, str]]) -> None:
    if refused:
        session.execute(_REFUSE, [{"refused_job_id": job_id, "code": code} for job_id, code in refused])


def counts(session: Session) -> tuple[int, int, int | None]:
    """(rows queued, of them refused, the oldest row's queued_at_us)."""
    queued, refused, oldest = session.execute(_COUNTS).one()
    return int(queued), int(refused), None if oldest is None else int(oldest)


def refused_rows(session: Session, limit: int) -> list[tuple[str, str]]:
    return [(job_id, code) for job_id, code in session.execute(_REFUSED, {"limit": limit})]


def scan_rows(session: Session, batch_size: int) -> Iterator[Row]:
    """Every queued row (refused ones too) in job id order, a page at a time."""
    assert batch_size > 0
    after = ""
    columns = [*(_QUEUE.c[name] for name in _COLUMNS), _QUEUE.c.failed_code]
    while True:
        page = session.execute(select(*columns).where(_QUEUE.c.job_id > after)
                               .order_by(_QUEUE.c.job_id).limit(batch_size)).all()
        yield from page
        if len(page) < batch_size:
            return
        after = page[-1].job_id
