"""Rows in, domain values out: the SQL edge of the coordinator.

Everything here takes the caller's session and never commits, so a caller
moves a job, its assignments and its ledger entries in one transaction.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import bindparam, func, insert, or_, select, true, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from contracts.hardware import ChipTier, HardwareReport, ThunderboltLink
from contracts.ids import JobId, NodeId, OperatorId
from contracts.lending import Heartbeat, LendingMode, LendingState
from contracts.logprobs import TokenLogprob, logprobs_from_json, logprobs_to_json
from contracts.models import ModelSpec
from coordinator.driver_sql import DriverStatement
from coordinator.tables import job_assignments, job_tokens, jobs, node_heartbeats, nodes


class JobStatus(StrEnum):
    QUEUED = "queued"
    ASSIGNED = "assigned"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


TERMINAL_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.FAILED})
PROMPT_TEXT = "text"
PROMPT_CHAT = "chat"
# jobs.error_code: why a job failed, for callers that map it (the gateway's HTTP codes).
ERROR_PROMPT_TOO_LONG = "prompt_too_long"  # the node found prompt + max_tokens over the context
ERROR_CANCELLED = "cancelled"  # the consumer cancelled it (or went away mid-stream)
ERROR_STOP_SEQUENCE = "stop_sequence"  # ended at a stop sequence the consumer asked for
ERROR_NO_CAPACITY = "no_capacity"  # no Mac took it within the gateway's admission wait
ACTIVE_STATUSES = frozenset({JobStatus.ASSIGNED, JobStatus.RUNNING})


@dataclass(frozen=True)
class NodeRecord:
    node_id: NodeId
    public_key: bytes
    operator_id: OperatorId
    display_name: str
    hardware: HardwareReport
    models: tuple[ModelSpec, ...]
    max_concurrent_jobs: int
    registered_at_ms: int
    last_heartbeat_ms: int
    lending: LendingState = LendingState()
    warm_models: tuple[str, ...] = ()
    measured_bandwidth_gb_s: float | None = None  # from the latest self-benchmark
    benchmark_flag: str | None = None  # why that benchmark does not fit the claimed chip
    left_at_ms: int | None = None  # the node left the network (Leave) and is not placed on

    def model(self, model_id: str) -> ModelSpec | None:
        return next((m for m in self.models if m.model_id == model_id), None)


@dataclass(frozen=True)
class JobRecord:
    job_id: JobId
    consumer_id: str
    request_id: str | None
    model_id: str
    prompt: str
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    min_decode_tokens_per_s: float
    context_tokens: int
    status: JobStatus
    created_at_ms: int
    strategy: str | None = None
    layer_split: tuple[int, ...] = ()
    explanation_json: str | None = None
    attempt: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    receipt_body: bytes | None = None
    receipt_signature: bytes | None = None
    receipt_verified: bool = False
    credited_base_units: int = 0
    error: str | None = None
    assigned_at_ms: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    node_ids: tuple[NodeId, ...] = ()  # the current attempt's nodes, from job_assignments
    # The consumer API's fields (coordinator.gateway, coordinator.billing).
    api_key_id: str | None = None
    reserved_base_units: int = 0  # the consumer's reservation; 0 when the network pays
    billing_closed_at_ms: int | None = None
    prompt_format: str = PROMPT_TEXT  # PROMPT_CHAT: prompt is contracts.chat's canonical text
    stop: tuple[str, ...] = ()
    top_logprobs: int = -1  # -1: no logprobs; 0: the chosen token's only; k: and the top k
    error_code: str | None = None


@dataclass(frozen=True)
class TokenChunk:
    first_index: int
    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token when the job asked, else none


# --- nodes ---------------------------------------------------------------

def hardware_to_json(hardware: HardwareReport) -> str:
    return json.dumps(dataclasses.asdict(hardware), sort_keys=True)


def hardware_from_json(text: str) -> HardwareReport:
    fields = json.loads(text)
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
        measured_bandwidth_gb_s=row.measured_bandwidth_gb_s, benchmark_flag=row.benchmark_flag,
        left_at_ms=row.left_at_ms,
    )


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


def insert_signed_heartbeat(session: Session, heartbeat: Heartbeat, received_at_ms: int,
                            signature: bytes) -> bool:
    """Store a verified heartbeat; False when one with the same sent_at_ms exists (a replay)."""
    lending = heartbeat.lending
    try:
        with session.begin_nested():
            session.execute(insert(node_heartbeats).values(
                node_id=heartbeat.node_id, sent_at_ms=heartbeat.sent_at_ms,
                received_at_ms=received_at_ms, mode=lending.mode.value,
                running_jobs=heartbeat.running_jobs, owner_active=lending.owner_active,
                accepting_jobs=lending.accepting_jobs,
                memory_cap_bytes=lending.memory_cap_bytes or 0, signature=signature))
    except IntegrityError:
        return False
    return True


def last_signed_heartbeat_ms(session: Session, node_id: str) -> int | None:
    """sent_at_ms of the node's newest stored heartbeat; a new one must be later."""
    return session.execute(select(func.max(node_heartbeats.c.sent_at_ms))
                           .where(node_heartbeats.c.node_id == node_id)).scalar_one()


def heartbeat_times(session: Session, node_id: str, since_ms: int, until_ms: int,
                    modes: frozenset[LendingMode] | None = None) -> list[int]:
    """When the coordinator received the node's signed heartbeats, in [since_ms, until_ms), ascending.

    Only heartbeats whose signature verified are stored, so each time is proof
    the node was online then. `modes` keeps only heartbeats sent in those
    lending modes (e.g. {LendingMode.ULTRA_SEAT} for the Ultra-seat bonus).
    """
    query = (select(node_heartbeats.c.received_at_ms)
             .where(node_heartbeats.c.node_id == node_id,
                    node_heartbeats.c.received_at_ms >= since_ms,
                    node_heartbeats.c.received_at_ms < until_ms)
             .order_by(node_heartbeats.c.received_at_ms))
    if modes is not None:
        query = query.where(node_heartbeats.c.mode.in_([mode.value for mode in modes]))
    return [int(t) for t in session.execute(query).scalars()]


def prune_heartbeats(session: Session, before_ms: int) -> int:
    """Drop heartbeats received before before_ms (older than any open epoch); returns how many."""
    result = session.execute(node_heartbeats.delete().where(
        node_heartbeats.c.received_at_ms < before_ms))
    return result.rowcount


# --- jobs ----------------------------------------------------------------

_JOB_SCALARS = ("job_id", "consumer_id", "request_id", "model_id", "prompt", "max_tokens",
                "temperature", "top_p", "seed", "min_decode_tokens_per_s", "context_tokens",
                "created_at_ms", "strategy", "explanation_json", "attempt", "prompt_tokens",
                "completion_tokens", "receipt_body", "receipt_signature", "receipt_verified",
                "credited_base_units", "error", "assigned_at_ms", "started_at_ms", "finished_at_ms",
                "api_key_id", "reserved_base_units", "billing_closed_at_ms", "prompt_format",
                "top_logprobs", "error_code")


# Statements on the submit and token paths are built once: a reused statement skips
# SQLAlchemy's per-call construction and cache-key work (about 0.1 ms a statement). Those
# that are DriverStatements skip the rest of its work too on SQLite (coordinator.driver_sql).
_JOB_NODE_IDS = DriverStatement(select(job_assignments.c.node_id).where(
    job_assignments.c.job_id == bindparam("job_id"), job_assignments.c.attempt == bindparam("attempt")
).order_by(job_assignments.c.node_id))
_JOB_BY_ID = select(jobs).where(jobs.c.job_id == bindparam("job_id"))
_JOB_BY_ID_FOR_UPDATE = _JOB_BY_ID.with_for_update(of=jobs)
_INSERT_JOB = insert(jobs)
_QUEUED_AHEAD = DriverStatement(select(func.count()).select_from(jobs).where(
    jobs.c.status == JobStatus.QUEUED.value,
    (jobs.c.created_at_ms < bindparam("created_at_ms"))
    | ((jobs.c.created_at_ms == bindparam("created_at_ms")) & (jobs.c.job_id < bindparam("job_id")))))
_ANY_QUEUED = select(jobs.c.job_id).where(jobs.c.status == JobStatus.QUEUED.value).limit(1)
# true(): SQL's own literal, not a Boolean bind, which would need SQLAlchemy's conversion.
# Parameters end in "_": SQLAlchemy reserves a column's own name in an INSERT's VALUES.
_INSERT_ASSIGNMENT = DriverStatement(insert(job_assignments).values(
    {**{name: bindparam(f"{name}_") for name in ("job_id", "node_id", "attempt", "reserved_memory_bytes", "layers")},
     "active": true()}))
_ALL_NODES = select(nodes).order_by(nodes.c.node_id)
_NODE_BY_ID = select(nodes).where(nodes.c.node_id == bindparam("node_id"))
_NODE_BY_SESSION = select(nodes).where(nodes.c.session_token_sha256 == bindparam("token"))
_COMMITTED_BY_NODE = DriverStatement(select(
    job_assignments.c.node_id, func.sum(job_assignments.c.reserved_memory_bytes), func.count()
).where(job_assignments.c.active.is_(True)).group_by(job_assignments.c.node_id))


def _job_from_row(session: Session, row) -> JobRecord:  # type: ignore[no-untyped-def]
    node_ids = [found[0] for found in _JOB_NODE_IDS.rows(session, {"job_id": row.job_id, "attempt": row.attempt})]
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


# Built once: the token path runs these for every chunk, and a reused statement
# skips SQLAlchemy's per-call construction and cache-key work.
_STREAMING_JOB = DriverStatement(select(
    jobs.c.status, jobs.c.max_tokens,
    select(job_assignments.c.node_id).where(
        job_assignments.c.job_id == jobs.c.job_id, job_assignments.c.attempt == jobs.c.attempt,
        job_assignments.c.node_id == bindparam("node_id")).exists().label("assigned"),
).where(jobs.c.job_id == bindparam("job_id")).with_for_update(of=jobs))


def lock_streaming_job(session: Session, job_id: str, node_id: str) -> StreamingJob | None:
    """Row-lock a job (PostgreSQL) and read what accepting its tokens checks; None if unknown."""
    rows = _STREAMING_JOB.rows(session, {"job_id": job_id, "node_id": node_id})
    if not rows:
        return None
    status, max_tokens, assigned = rows[0]
    return StreamingJob(JobStatus(status), max_tokens, bool(assigned))


def job_by_id(session: Session, job_id: str, for_update: bool = False) -> JobRecord | None:
    """The job; for_update row-locks it (PostgreSQL), which every path that goes on to
    the ledger does first: job row, then the ledger's write lock, never the other order."""
    row = session.execute(_JOB_BY_ID_FOR_UPDATE if for_update else _JOB_BY_ID, {"job_id": job_id}).first()
    return None if row is None else _job_from_row(session, row)


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
    [(ahead,)] = _QUEUED_AHEAD.rows(session, {"created_at_ms": job.created_at_ms, "job_id": job.job_id})
    return ahead + 1


def transition_job(session: Session, job_id: str, from_statuses: frozenset[JobStatus],
                   **values: object) -> bool:
    """Compare-and-set on status: True only for the one caller that moved the job."""
    if "status" in values:
        values["status"] = JobStatus(values["status"]).value  # type: ignore[arg-type]
    if "layer_split" in values:
        values["layer_split_json"] = json.dumps(list(values.pop("layer_split")))  # type: ignore[call-overload]
    statement = _transition_statement(from_statuses, tuple(values))
    return statement.execute(session, {"job_id_": job_id, **{f"{k}_": v for k, v in values.items()}}) == 1


@functools.lru_cache(maxsize=256)
def _transition_statement(from_statuses: frozenset[JobStatus], columns: tuple[str, ...]) -> DriverStatement:
    """One built statement per (from statuses, columns set): the callers use a handful.

    Parameters end in "_": SQLAlchemy reserves a column's own name in an UPDATE's SET."""
    # Equalities, not status IN (...): a literal IN list is an expanding parameter, rendered
    # anew on every execution, and every job's every step runs one of these.
    statuses = [jobs.c.status == status.value for status in sorted(from_statuses, key=lambda s: s.value)]
    return DriverStatement(update(jobs).where(
        jobs.c.job_id == bindparam("job_id_"), or_(*statuses),
    ).values({column: bindparam(f"{column}_") for column in columns}))


# --- assignments ---------------------------------------------------------

def add_assignments(session: Session, job_id: str, attempt: int,
                    shares: tuple[tuple[str, int, int], ...]) -> None:
    """shares: (node_id, reserved_memory_bytes, layers) for each node of the placement."""
    for node_id, memory, layers in shares:  # one Mac's, mostly
        _INSERT_ASSIGNMENT.execute(session, dict(job_id_=job_id, node_id_=node_id, attempt_=attempt,
                                                 reserved_memory_bytes_=memory, layers_=layers))


def release_assignments(session: Session, job_id: str) -> list[str]:
    """Deactivate a job's assignments; returns the nodes that were freed."""
    freed = session.execute(select(job_assignments.c.node_id).where(
        job_assignments.c.job_id == job_id, job_assignments.c.active.is_(True))).scalars().all()
    session.execute(update(job_assignments).where(job_assignments.c.job_id == job_id)
                    .values(active=False))
    return list(freed)


def committed_by_node(session: Session) -> dict[str, tuple[int, int]]:
    """node_id -> (reserved memory bytes, active job count) over active assignments."""
    rows = _COMMITTED_BY_NODE.rows(session, {})
    return {node_id: (int(memory), int(count)) for node_id, memory, count in rows}


_COMMITTED_FOR_NODES = select(
    job_assignments.c.node_id, func.sum(job_assignments.c.reserved_memory_bytes), func.count()
).where(job_assignments.c.active.is_(True),
        job_assignments.c.node_id.in_(bindparam("node_ids", expanding=True))).group_by(job_assignments.c.node_id)


_COMMITTED_FOR_NODE = DriverStatement(select(
    job_assignments.c.node_id, func.sum(job_assignments.c.reserved_memory_bytes), func.count()
).where(job_assignments.c.active.is_(True),
        job_assignments.c.node_id == bindparam("node_id")).group_by(job_assignments.c.node_id))


def committed_for_nodes(session: Session, node_ids: list[str]) -> dict[str, tuple[int, int]]:
    """committed_by_node for just these nodes."""
    committed: dict[str, tuple[int, int]] = {}
    if len(node_ids) == 1:  # as nodes_by_ids: no expanding list for one id
        rows = _COMMITTED_FOR_NODE.rows(session, {"node_id": node_ids[0]})
        return {node_id: (int(memory), int(count)) for node_id, memory, count in rows}
    for start in range(0, len(node_ids), 500):
        rows = session.execute(_COMMITTED_FOR_NODES, {"node_ids": node_ids[start:start + 500]})
        committed.update({node_id: (int(memory), int(count)) for node_id, memory, count in rows})
    return committed


def active_jobs_for_node(session: Session, node_id: str) -> list[JobRecord]:
    job_ids = session.execute(select(job_assignments.c.job_id).where(
        job_assignments.c.node_id == node_id, job_assignments.c.active.is_(True))
        .order_by(job_assignments.c.job_id)).scalars().all()
    found = (job_by_id(session, job_id) for job_id in job_ids)
    return [job for job in found if job is not None and job.status in ACTIVE_STATUSES]


# --- tokens --------------------------------------------------------------

_CHUNK_AT = select(job_tokens.c.first_index).where(
    job_tokens.c.job_id == bindparam("job_id"), job_tokens.c.first_index == bindparam("first_index"))
_INSERT_CHUNK = DriverStatement(insert(job_tokens))
_CHUNKS_FROM = select(job_tokens).where(
    job_tokens.c.job_id == bindparam("job_id"), job_tokens.c.first_index >= bindparam("from_index")
).order_by(job_tokens.c.first_index)
_LAST_CHUNK = DriverStatement(select(job_tokens.c.first_index, job_tokens.c.token_ids_json).where(
    job_tokens.c.job_id == bindparam("job_id")).order_by(job_tokens.c.first_index.desc()).limit(1))


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
    logprobs = json.dumps(logprobs_to_json(chunk.logprobs)) if chunk.logprobs else None
    _INSERT_CHUNK.execute(session, {
        "job_id": job_id, "first_index": chunk.first_index,
        "token_ids_json": json.dumps(list(chunk.token_ids)), "text": chunk.text,
        "logprobs_json": logprobs})


def token_chunks(session: Session, job_id: str, from_index: int = 0) -> list[TokenChunk]:
    rows = session.execute(_CHUNKS_FROM, {"job_id": job_id, "from_index": from_index})
    return [TokenChunk(r.first_index, tuple(json.loads(r.token_ids_json)), r.text,
                       logprobs_from_json(json.loads(r.logprobs_json)) if r.logprobs_json else ())
            for r in rows]


def token_count(session: Session, job_id: str) -> int:
    """Tokens stored so far: the end of the last chunk (chunks are contiguous from 0)."""
    rows = _LAST_CHUNK.rows(session, {"job_id": job_id})
    if not rows:
        return 0
    first_index, token_ids_json = rows[0]
    return first_index + len(json.loads(token_ids_json))
