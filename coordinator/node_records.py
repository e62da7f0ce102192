"""The SQL edge for what nodes report about themselves: benchmarks, pods, leaving.

Like records.py, every function takes the caller's session and never commits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from contracts.benchmarks import BenchmarkResult
from contracts.hardware import LinkKind
from contracts.ids import NodeId
from contracts.pods import PodCable, PodDeclaration
from coordinator import records
from coordinator.records import JobRecord, TokenChunk
from coordinator.tables import job_assignments, job_tokens, node_benchmarks, nodes, pods

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
        flag=flag))
    session.execute(update(nodes).where(nodes.c.node_id == node_id).values(
        measured_bandwidth_gb_s=result.memory_bandwidth_gb_s, benchmark_flag=flag))
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
        run_time_ms=r.run_time_ms), r.received_at_ms, r.flag) for r in rows]


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
    chunks = records.token_chunks(session, job_id, next_index)
    if (chunks and chunks[0].first_index == next_index) or records.token_count(session, job_id) <= next_index:
        return chunks
    unseen: list[TokenChunk] = []
    text = ""
    for chunk in records.token_chunks(session, job_id, 0):
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


LEAVING_REASON = "leaving the network"


def mark_left(session: Session, node_id: str, now_ms: int) -> None:
    session.execute(update(nodes).where(nodes.c.node_id == node_id).values(
        left_at_ms=now_ms, accepting_jobs=False, lending_reason=LEAVING_REASON))


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
