"""Job rows in, JobRecords out: jobs, their assignments and their streamed tokens.

Every function takes the caller's session and never commits, so a caller moves a
job, its assignments and its ledger entries in one transaction.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import Update, and_, bindparam, case, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from contracts.ids import NodeId
from contracts.logprobs import logprobs_from_json, logprobs_to_json
from coordinator.model import ACTIVE_STATUSES, JobRecord, JobStatus, TokenChunk
from coordinator.storage.tables import job_assignments, job_tokens, jobs, nodes

_JOB_SCALARS = ("job_id", "consumer_id", "request_id", "model_id", "prompt", "max_tokens",
                "temperature", "top_p", "seed", "min_decode_tokens_per_s", "context_tokens",
                "created_at_ms", "strategy", "explanation_json", "attempt", "prompt_tokens",
                "completion_tokens", "receipt_body", "receipt_signature", "receipt_verified",
                "credited_base_units", "error", "assigned_at_ms", "started_at_ms", "finished_at_ms",
                "api_key_id", "reserved_base_units", "billing_closed_at_ms", "prompt_format",
                "top_logprobs", "error_code", "partial_receipt_body", "partial_receipt_signature",
                "delivery", "cached_prompt_tokens")


# Statements on the submit and token paths are built once: a reused statement skips
# SQLAlchemy's per-call construction and cache-key work (about 0.1 ms a statement).
_JOB_NODE_IDS = select(job_assignments.c.node_id).where(
    job_assignments.c.job_id == bindparam("job_id"), job_assignments.c.attempt == bindparam("attempt")
).order_by(job_assignments.c.node_id)
_JOB_BY_ID = select(jobs).where(jobs.c.job_id == bindparam("job_id"))
_JOB_BY_ID_FOR_UPDATE = _JOB_BY_ID.with_for_update(of=jobs)
_INSERT_JOB = insert(jobs)
_QUEUED_AHEAD = select(func.count()).select_from(jobs).where(
    jobs.c.status == JobStatus.QUEUED.value,
    (jobs.c.created_at_ms < bindparam("created_at_ms"))
    | ((jobs.c.created_at_ms == bindparam("created_at_ms")) & (jobs.c.job_id < bindparam("job_id"))))
_ANY_QUEUED = select(jobs.c.job_id).where(jobs.c.status == JobStatus.QUEUED.value).limit(1)
_INSERT_ASSIGNMENT = insert(job_assignments)
# Per node and model: the memory reserved, the shared part of it, counted once, and the jobs. A model's
# shared part (weights and runtime) is held once however many of its jobs run on one Mac.
_SHARED = job_assignments.c.shared_memory_bytes
_COMMITMENT_COLUMNS = (
    job_assignments.c.node_id, jobs.c.model_id, func.sum(job_assignments.c.reserved_memory_bytes),
    func.sum(_SHARED), func.max(_SHARED), func.count(), func.sum(case((_SHARED > 0, 1), else_=0)))
_COMMITTED_BY_NODE = select(*_COMMITMENT_COLUMNS).join(jobs, jobs.c.job_id == job_assignments.c.job_id).where(
    job_assignments.c.active.is_(True)).group_by(job_assignments.c.node_id, jobs.c.model_id)

# node id -> (committed bytes, running jobs, (model id, shared bytes, jobs sharing them) by model id),
# as placement's MacCandidate holds them.
Commitment = tuple[int, int, tuple[tuple[str, int, int], ...]]


def _commitments(rows) -> dict[str, Commitment]:  # type: ignore[no-untyped-def]
    """Fold per-model rows into each node's commitment."""
    folded: dict[str, tuple[int, int, list[tuple[str, int, int]]]] = {}
    for node_id, model_id, reserved, shared_sum, shared_max, count, sharing in rows:
        memory, running, shared = folded.get(node_id, (0, 0, []))
        memory += int(reserved) - int(shared_sum or 0) + int(shared_max or 0)
        if shared_max:
            shared.append((model_id, int(shared_max), int(sharing)))
        folded[node_id] = (memory, running + int(count), shared)
    return {node_id: (memory, running, tuple(sorted(shared))) for node_id, (memory, running, shared) in folded.items()}


def _job_from_row(session: Session, row) -> JobRecord:  # type: ignore[no-untyped-def]
    node_ids = session.execute(_JOB_NODE_IDS, {"job_id": row.job_id, "attempt": row.attempt}).scalars().all()
    values = {name: getattr(row, name) for name in _JOB_SCALARS}
    values["layer_split"] = tuple(json.loads(row.layer_split_json or "[]"))
    values["stop"] = tuple(json.loads(row.stop_json))
    return JobRecord(status=JobStatus(row.status), node_ids=tuple(NodeId(n) for n in node_ids),
                     **values)


def insert_job(session: Session, job: JobRecord, id_is_new: bool = False) -> bool:
    """Insert a new job; False when its id (a retried request) already exists.

    id_is_new: the id was just drawn at random, so no row can hold it and no savepoint
    is spent on catching a duplicate (two statements on the submit's path)."""
    values = {name: getattr(job, name) for name in _JOB_SCALARS}
    values.update(status=job.status.value, layer_split_json=json.dumps(list(job.layer_split)),
                  stop_json=json.dumps(list(job.stop)))
    if id_is_new:
        session.execute(_INSERT_JOB, values)
        return True
    try:
        with session.begin_nested():
            session.execute(_INSERT_JOB, values)
    except IntegrityError:
        return False
    return True


@dataclass(frozen=True)
class StreamingJob:
    """What storing a token chunk needs to know of its job, read in one locking query."""

    status: JobStatus
    max_tokens: int
    assigned_to_node: bool  # the node holds an assignment of the job's current attempt
    attempt: int  # the fencing token of the current assignment
    model_id: str = ""  # whose vocabulary bounds the streamed token ids


# Built once: the token path runs these for every chunk, and a reused statement
# skips SQLAlchemy's per-call construction and cache-key work.
_STREAMING_JOB = select(
    jobs.c.status, jobs.c.max_tokens, jobs.c.attempt, jobs.c.model_id,
    select(job_assignments.c.node_id).where(
        job_assignments.c.job_id == jobs.c.job_id, job_assignments.c.attempt == jobs.c.attempt,
        job_assignments.c.node_id == bindparam("node_id")).exists().label("assigned"),
).where(jobs.c.job_id == bindparam("job_id")).with_for_update(of=jobs)


def lock_streaming_job(session: Session, job_id: str, node_id: str) -> StreamingJob | None:
    """Row-lock a job (PostgreSQL) and read what accepting its tokens checks; None if unknown."""
    row = session.execute(_STREAMING_JOB, {"job_id": job_id, "node_id": node_id}).first()
    if row is None:
        return None
    status, max_tokens, attempt, model_id, assigned = row
    return StreamingJob(JobStatus(status), max_tokens, bool(assigned), attempt, model_id)


@dataclass(frozen=True)
class StreamingBatchJob:
    """A job as a node's multiplexed token message needs it: its streaming checks, the
    tokens stored so far and the prompt's length (for a prompt-cache count)."""

    job: StreamingJob
    token_count: int
    prompt_tokens: int


_last_chunk = job_tokens.alias("last_chunk")
# Each job with its last stored chunk (none yet: NULLs), all in one locking read, in job_id
# order: two transactions never take the same rows in opposite orders.
_STREAMING_JOBS = select(
    jobs.c.job_id, jobs.c.status, jobs.c.max_tokens, jobs.c.attempt, jobs.c.model_id, jobs.c.prompt_tokens,
    select(job_assignments.c.node_id).where(
        job_assignments.c.job_id == jobs.c.job_id, job_assignments.c.attempt == jobs.c.attempt,
        job_assignments.c.node_id == bindparam("node_id")).exists().label("assigned"),
    _last_chunk.c.first_index, _last_chunk.c.token_ids_json,
).select_from(jobs.outerjoin(_last_chunk, and_(
    _last_chunk.c.job_id == jobs.c.job_id,
    _last_chunk.c.first_index == select(func.max(job_tokens.c.first_index)).where(
        job_tokens.c.job_id == jobs.c.job_id).scalar_subquery()))
).where(jobs.c.job_id.in_(bindparam("job_ids", expanding=True))
        ).order_by(jobs.c.job_id).with_for_update(of=jobs)


def lock_streaming_jobs(session: Session, job_ids: list[str], node_id: str) -> dict[str, StreamingBatchJob]:
    """lock_streaming_job and token_count for many jobs in one query; unknown jobs are absent."""
    found: dict[str, StreamingBatchJob] = {}
    if not job_ids:
        return found
    rows = session.execute(_STREAMING_JOBS, {"job_ids": list(job_ids), "node_id": node_id})
    for job_id, status, max_tokens, attempt, model_id, prompt_tokens, assigned, first_index, ids_json in rows:
        count = 0 if first_index is None else first_index + len(json.loads(ids_json))
        found[job_id] = StreamingBatchJob(
            StreamingJob(JobStatus(status), max_tokens, bool(assigned), attempt, model_id),
            count, prompt_tokens or 0)
    return found


def job_by_id(session: Session, job_id: str, for_update: bool = False) -> JobRecord | None:
    """The job; for_update row-locks it (PostgreSQL), which every path that goes on to
    the ledger does first: job row, then the ledger's write lock, never the other order."""
    row = session.execute(_JOB_BY_ID_FOR_UPDATE if for_update else _JOB_BY_ID, {"job_id": job_id}).first()
    return None if row is None else _job_from_row(session, row)


_RECEIPT_OF = select(jobs.c.receipt_body, jobs.c.prompt).where(jobs.c.job_id == bindparam("job_id"))


def receipt_of(session: Session, job_id: str) -> tuple[bytes | None, str] | None:
    """A job's receipt body (None until it completes) and prompt, or None when there is no such
    job: what checks judge a job by, without job_by_id's whole row and its nodes' read."""
    row = session.execute(_RECEIPT_OF, {"job_id": job_id}).first()
    return None if row is None else (row.receipt_body, row.prompt)


def any_queued(session: Session) -> bool:
    """Whether some job waits for a Mac: one step down the status index."""
    return session.execute(_ANY_QUEUED).first() is not None


def queued_jobs(session: Session, limit: int) -> list[JobRecord]:
    rows = session.execute(select(jobs).where(jobs.c.status == JobStatus.QUEUED.value)
                           .order_by(jobs.c.created_at_ms, jobs.c.job_id).limit(limit))
    return [_job_from_row(session, r) for r in rows]


def queue_position(session: Session, job: JobRecord) -> int:
    """1 for the oldest queued job; 0 when the job is not queued."""
    if job.status is not JobStatus.QUEUED:
        return 0
    ahead = session.execute(_QUEUED_AHEAD, {"created_at_ms": job.created_at_ms, "job_id": job.job_id}).scalar_one()
    return ahead + 1


def transition_job(session: Session, job_id: str, from_statuses: frozenset[JobStatus],
                   **values: object) -> bool:
    """Compare-and-set on status: True only for the one caller that moved the job."""
    if "status" in values:
        values["status"] = JobStatus(values["status"]).value  # type: ignore[arg-type]
    if "layer_split" in values:
        values["layer_split_json"] = json.dumps(list(values.pop("layer_split")))  # type: ignore[call-overload]
    statement = _transition_statement(from_statuses, tuple(values))
    result = session.execute(statement, {"job_id_": job_id, **{f"{k}_": v for k, v in values.items()}})
    return result.rowcount == 1  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=256)
def _transition_statement(from_statuses: frozenset[JobStatus], columns: tuple[str, ...]) -> Update:
    """One built statement per (from statuses, columns set): the callers use a handful.

    Parameters end in "_": SQLAlchemy reserves a column's own name in an UPDATE's SET."""
    # Equalities, not status IN (...): a literal IN list is an expanding parameter, rendered
    # anew on every execution, and every job's every step runs one of these.
    statuses = [jobs.c.status == status.value for status in sorted(from_statuses, key=lambda s: s.value)]
    return update(jobs).where(
        jobs.c.job_id == bindparam("job_id_"), or_(*statuses),
    ).values({column: bindparam(f"{column}_") for column in columns})


# --- assignments ---------------------------------------------------------

def add_assignments(session: Session, job_id: str, attempt: int,
                    shares: tuple[tuple[str, int, int], ...], shared_memory_bytes: int = 0) -> None:
    """shares: (node_id, reserved_memory_bytes, layers) for each node of the placement;
    shared_memory_bytes: of a single Mac's reservation, what jobs of the model there share."""
    assert shared_memory_bytes == 0 or len(shares) == 1, "pod ranks share nothing"
    for node_id, memory, layers in shares:  # one Mac's, mostly
        session.execute(_INSERT_ASSIGNMENT, dict(job_id=job_id, node_id=node_id, attempt=attempt,
                                                 reserved_memory_bytes=memory, layers=layers, active=True,
                                                 shared_memory_bytes=shared_memory_bytes))


def save_partial_receipt(session: Session, job_id: str, body: bytes, signature: bytes) -> None:
    """Keep the node's latest partial receipt; it is checked when the job ends, if it fails."""
    session.execute(update(jobs).where(jobs.c.job_id == job_id).values(
        partial_receipt_body=body, partial_receipt_signature=signature))


def release_assignments(session: Session, job_id: str) -> list[str]:
    """Deactivate a job's assignments; returns the nodes that were freed."""
    freed = session.execute(select(job_assignments.c.node_id).where(
        job_assignments.c.job_id == job_id, job_assignments.c.active.is_(True))).scalars().all()
    deactivate_assignments(session, job_id)
    return list(freed)


def deactivate_assignments(session: Session, job_id: str) -> None:
    """release_assignments for a caller that needs not know which nodes it freed (one statement, not two)."""
    session.execute(update(job_assignments).where(job_assignments.c.job_id == job_id)
                    .values(active=False))


def committed_by_node(session: Session) -> dict[str, Commitment]:
    """node_id -> its commitment over active assignments (a model's shared memory counted once)."""
    return _commitments(session.execute(_COMMITTED_BY_NODE))


_COMMITTED_FOR_NODES = select(*_COMMITMENT_COLUMNS).join(jobs, jobs.c.job_id == job_assignments.c.job_id).where(
    job_assignments.c.active.is_(True), job_assignments.c.node_id.in_(bindparam("node_ids", expanding=True))
).group_by(job_assignments.c.node_id, jobs.c.model_id)


_COMMITTED_FOR_NODE = select(*_COMMITMENT_COLUMNS).join(jobs, jobs.c.job_id == job_assignments.c.job_id).where(
    job_assignments.c.active.is_(True), job_assignments.c.node_id == bindparam("node_id")
).group_by(job_assignments.c.node_id, jobs.c.model_id)


def committed_for_nodes(session: Session, node_ids: list[str]) -> dict[str, Commitment]:
    """committed_by_node for just these nodes."""
    if len(node_ids) == 1:  # as nodes_by_ids: no expanding list for one id
        return _commitments(session.execute(_COMMITTED_FOR_NODE, {"node_id": node_ids[0]}))
    committed: dict[str, Commitment] = {}
    for start in range(0, len(node_ids), 500):
        committed.update(_commitments(session.execute(_COMMITTED_FOR_NODES, {"node_ids": node_ids[start:start + 500]})))
    return committed


_SILENT_NODES_HOLDING_JOBS = (
    select(job_assignments.c.node_id).distinct()
    .join(nodes, nodes.c.node_id == job_assignments.c.node_id)
    .where(job_assignments.c.active.is_(True), nodes.c.last_heartbeat_ms < bindparam("before_ms"))
    .order_by(job_assignments.c.node_id))


def silent_nodes_holding_jobs(session: Session, heartbeat_before_ms: int) -> list[str]:
    """Nodes last heard from before heartbeat_before_ms that still hold an active assignment:
    one query, however many silent nodes there are (most hold none)."""
    return list(session.execute(_SILENT_NODES_HOLDING_JOBS, {"before_ms": heartbeat_before_ms}).scalars())


def active_jobs_for_node(session: Session, node_id: str, skip: Collection[str] = ()) -> list[JobRecord]:
    """The node's active jobs, less those in skip (an assignment stream has sent them: their
    rows are not read again on each wake-up)."""
    job_ids = session.execute(select(job_assignments.c.job_id).where(
        job_assignments.c.node_id == node_id, job_assignments.c.active.is_(True))
        .order_by(job_assignments.c.job_id)).scalars().all()
    found = (job_by_id(session, job_id) for job_id in job_ids if job_id not in skip)
    return [job for job in found if job is not None and job.status in ACTIVE_STATUSES]


# --- tokens --------------------------------------------------------------

_CHUNK_AT = select(job_tokens.c.first_index).where(
    job_tokens.c.job_id == bindparam("job_id"), job_tokens.c.first_index == bindparam("first_index"))
_INSERT_CHUNK = insert(job_tokens)
_CHUNKS_FROM = select(job_tokens).where(
    job_tokens.c.job_id == bindparam("job_id"), job_tokens.c.first_index >= bindparam("from_index")
).order_by(job_tokens.c.first_index)
_LAST_CHUNK = select(job_tokens.c.first_index, job_tokens.c.token_ids_json).where(
    job_tokens.c.job_id == bindparam("job_id")).order_by(job_tokens.c.first_index.desc()).limit(1)


def has_chunk_at(session: Session, job_id: str, first_index: int) -> bool:
    return session.execute(_CHUNK_AT, {"job_id": job_id, "first_index": first_index}
                           ).first() is not None


def append_tokens(session: Session, job_id: str, chunk: TokenChunk) -> bool:
    """Store a chunk once; a re-sent chunk (same first index) is ignored."""
    if has_chunk_at(session, job_id, chunk.first_index):
        return False
    insert_chunk(session, job_id, chunk)
    return True


def insert_chunk(session: Session, job_id: str, chunk: TokenChunk) -> None:
    """Store a chunk known to be new: it starts where the stored tokens end."""
    session.execute(_INSERT_CHUNK, _chunk_row(job_id, chunk))


def insert_chunks(session: Session, chunks: list[tuple[str, TokenChunk]]) -> None:
    """insert_chunk for many (job_id, chunk) pairs, in one statement."""
    if chunks:
        session.execute(_INSERT_CHUNK, [_chunk_row(job_id, chunk) for job_id, chunk in chunks])


def _chunk_row(job_id: str, chunk: TokenChunk) -> dict[str, object]:
    logprobs = json.dumps(logprobs_to_json(chunk.logprobs)) if chunk.logprobs else None
    return {"job_id": job_id, "first_index": chunk.first_index,
            "token_ids_json": json.dumps(list(chunk.token_ids)), "text": chunk.text,
            "logprobs_json": logprobs}


def token_chunks(session: Session, job_id: str, from_index: int = 0) -> list[TokenChunk]:
    rows = session.execute(_CHUNKS_FROM, {"job_id": job_id, "from_index": from_index})
    return [TokenChunk(r.first_index, tuple(json.loads(r.token_ids_json)), r.text,
                       logprobs_from_json(json.loads(r.logprobs_json)) if r.logprobs_json else ())
            for r in rows]


def token_count(session: Session, job_id: str) -> int:
    """Tokens stored so far: the end of the last chunk (chunks are contiguous from 0)."""
    row = session.execute(_LAST_CHUNK, {"job_id": job_id}).first()
    if row is None:
        return 0
    first_index, token_ids_json = row
    return first_index + len(json.loads(token_ids_json))


def delete_tokens(session: Session, job_id: str) -> None:
    session.execute(delete(job_tokens).where(job_tokens.c.job_id == job_id))


def chunks_for_reader(session: Session, job_id: str, next_index: int,
                      delivered_chars: int) -> list[TokenChunk]:
    """The chunks a reader holding next_index tokens (delivered_chars of text) has not seen.

    Normally these are the chunks from next_index on. After a node handed a job
    back mid-stream, the next node's chunks may straddle next_index; such a chunk
    is cut to its unseen tokens, and its text to what follows the characters
    already delivered (the text of tokens 0..n is the same however they were chunked).
    """
    chunks = token_chunks(session, job_id, next_index)
    if (chunks and chunks[0].first_index == next_index) or token_count(session, job_id) <= next_index:
        return chunks
    unseen: list[TokenChunk] = []
    text = ""
    for chunk in token_chunks(session, job_id, 0):
        text += chunk.text
        end = chunk.first_index + len(chunk.token_ids)
        if end <= next_index:
            continue
        if chunk.first_index >= next_index:
            unseen.append(chunk)
            continue
        cut = next_index - chunk.first_index
        unseen.append(TokenChunk(next_index, chunk.token_ids[cut:], text[delivered_chars:],
                                 chunk.logprobs[cut:] if chunk.logprobs else ()))
    return unseen


_OPEN_BILLING = (jobs.c.reserved_base_units > 0) & jobs.c.billing_closed_at_ms.is_(None)


def jobs_with_open_billing(session: Session, completed_since_ms: int, limit: int) -> list[str]:
    """Ended jobs whose reservation is still open: failed ones first, then recently completed."""
    failed = select(jobs.c.job_id).where(_OPEN_BILLING, jobs.c.status == JobStatus.FAILED.value)
    completed = select(jobs.c.job_id).where(
        _OPEN_BILLING, jobs.c.status == JobStatus.COMPLETED.value,
        jobs.c.finished_at_ms > completed_since_ms)
    found: list[str] = []
    for query in (failed, completed):
        found += session.execute(query.order_by(jobs.c.job_id).limit(limit)).scalars()
    return found


def close_billing(session: Session, job_id: str, now_ms: int) -> bool:
    """Mark an ended job's reservation resolved; True only for the one caller that did."""
    return session.execute(update(jobs).where(
        jobs.c.job_id == job_id, jobs.c.billing_closed_at_ms.is_(None))
        .values(billing_closed_at_ms=now_ms)).rowcount == 1
