"""Planted checks: claims the coordinator built to be wrong, so a lazy checker is caught.

A checker that answered "matches" without replaying would earn fees for nothing: a mismatch
starts a dispute, but a match is never looked at again. So with a real check sent to a node,
the coordinator sometimes sends it a planted one too, at economics.planted_rate (the less the
node has at stake, the more often). A planted check reuses a verified job's prompt, output and
sampling settings under a fresh job id. Its claim is a receipt whose commitment is a verified
replay's values, keyed to that id and shifted by half the value range. So every honest replay
differs at every committed position, and the right answer is "differs". The checker cannot tell
it from a real check: a check job carries no proof, and the job was never its own nor checked by it.

A checker whose answer passes a planted claim fails a check (its trust falls as a cheater's
does), loses its stake as a failed job would, and gives back every fee paid for its checks
within the claw-back horizon; the reason is kept on the planted row (`mlxnet checks --node`).
Nothing is paid for a planted check, whatever the answer. Its claimant is synthetic
(PLANTED_NODE_ID), so no real node's trust, credit or pairing history is touched, and an
answer that rejects it, or a failure to replay it, costs the checker nothing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.commitments import (
    PRIME, ActivationCommitment, ChunkCommitment, TopCandidates, chunk_key, commit_chunk,
    encode_commitment, generated_chunk_count,
)
from contracts.ids import JOB_ID_PREFIX, JobId, NodeId
from contracts.peer_checks import CheckResultFormatError, decode_result
from contracts.receipts import Receipt, decode_receipt, encode_receipt
from coordinator.storage import job_rows
from coordinator.verification import outcomes, peer_store, stakes
from coordinator.verification.economics import StakePolicy, checker_at_stake, planted_rate
from coordinator.verification.judge import CheckVerdict
from coordinator.verification.peer_store import PeerCheckRecord, PeerCheckStatus
from coordinator.verification.peers import Role
from coordinator.verification.policy import TrustPolicy

log = logging.getLogger(__name__)

PLANTED_NODE_ID = "planted"  # the claimant of every planted check: real node ids start "node-"
SOURCES_READ_MAX = 32  # the latest verified replays a planted claim is drawn from
TAMPER_UNITS = PRIME // 2  # every committed value moved this far: no honest replay is within tolerance


def _tampered(chunk: ChunkCommitment) -> ChunkCommitment:
    """The same polynomial plus a constant: every value it commits to moves by TAMPER_UNITS."""
    first = (chunk.coefficients[0] + TAMPER_UNITS) % PRIME
    return ChunkCommitment(chunk.exponent, (first, *chunk.coefficients[1:]))


def planted_claim(source: Receipt, prompt: TopCandidates, generated: tuple[TopCandidates, ...],
                  job_id: JobId) -> Receipt:
    """A receipt for `job_id` over the source job's prompt and output, committing to the verified
    replay's values moved by TAMPER_UNITS: any honest replay rejects it."""
    assert len(generated) == generated_chunk_count(source.completion_tokens)
    chunks = [_tampered(commit_chunk(c, chunk_key(job_id, n))) for n, c in enumerate((prompt, *generated))]
    commitment = ActivationCommitment(chunks[0], tuple(chunks[1:]))
    return dataclasses.replace(source, job_id=job_id, node_id=NodeId(PLANTED_NODE_ID),
                               activation_commitment=encode_commitment(commitment))


def planted_job_id(draws: random.Random) -> JobId:
    """Shaped as new_job_id's: a checker cannot tell a planted job's id from a real one."""
    return JobId(JOB_ID_PREFIX + uuid.UUID(int=draws.getrandbits(128), version=4).hex)


@dataclass(frozen=True)
class Planting:
    """A real check just sent to a node: what a planted companion must match."""

    checker_node_id: str
    checker_operator_id: str
    model_id: str
    weights_digest: str
    job_credit: int  # the real check's job credit: what a lazy answer would save is a share of it


Sources = list[tuple[PeerCheckRecord, bytes | None]]  # peer_store.planting_sources' rows


def read_sources(session: Session) -> Sources:
    """The latest verified replays a planted claim may be built from (the same for every checker)."""
    return peer_store.planting_sources(session, SOURCES_READ_MAX)


def _source(session: Session, planting: Planting, draws: random.Random,
            sources: Sources) -> tuple[Receipt, TopCandidates, tuple[TopCandidates, ...]] | None:
    """A verified replay of the same weights, of a job the checker never ran nor checked."""
    rows = [(r, body) for r, body in sources
            if planting.checker_node_id not in (r.checked_node_id, r.checker_node_id) and r.result_body]
    seen = peer_store.checked_by(session, planting.checker_node_id, [r.job_id for r, _ in rows])
    found = []
    for row, receipt_body in rows:
        if row.job_id in seen or receipt_body is None:
            continue
        receipt = decode_receipt(receipt_body)
        if (receipt.model_id, receipt.weights_digest) == (planting.model_id, planting.weights_digest):
            found.append((receipt, row.result_body))
    if not found:
        return None
    receipt, body = found[draws.randrange(len(found))]
    try:
        result = decode_result(body)  # type: ignore[arg-type]
    except CheckResultFormatError as error:  # judged at the door; stored bytes cannot change
        raise AssertionError(f"stored check result of {receipt.job_id} no longer decodes") from error
    return receipt, result.prompt, result.generated


def plant(session: Session, planting: Planting, policy: StakePolicy, deadline_ms: int,
          draws: random.Random, now_ms: int, sources: Callable[[Session], Sources] = read_sources) -> str | None:
    """Perhaps send the checker a planted check beside its real one; its check id, or None.
    sources: read_sources, or a pass's one read of it (what planting inserts is never a source)."""
    horizon_start_ms = now_ms - policy.clawback_horizon_s * 1000
    fees, held, posted = peer_store.checker_stake(session, planting.checker_node_id, horizon_start_ms)
    at_stake = checker_at_stake(fees, held, posted, policy)
    if draws.random() >= planted_rate(planting.job_credit, at_stake, policy):
        return None
    source = _source(session, planting, draws, sources(session))
    if source is None:
        return None  # nothing verified yet on these weights that this node has not seen
    receipt, prompt, generated = source
    job_id = planted_job_id(draws)
    claim = planted_claim(receipt, prompt, generated, job_id)
    check_id = peer_store.check_id_for(job_id, Role.CHECK, 1)
    peer_store.insert_peer_check(session, PeerCheckRecord(
        check_id, job_id, Role.CHECK, 1, PLANTED_NODE_ID, PLANTED_NODE_ID, PeerCheckStatus.ASSIGNED, now_ms,
        planting.checker_node_id, planting.checker_operator_id, now_ms, now_ms + deadline_ms,
        reason=f"planted: job {receipt.job_id}'s claim with every committed value moved; the right "
               "answer is that it differs",
        planted_from_job_id=receipt.job_id, claim_body=encode_receipt(claim)))
    return check_id


def claim_of(session: Session, row: PeerCheckRecord) -> tuple[Receipt, str, tuple[int, ...]]:
    """What a planted check is judged against: its claim, and the source job's prompt and output."""
    assert row.planted_from_job_id is not None and row.claim_body is not None
    source = job_rows.receipt_of(session, row.planted_from_job_id)
    assert source is not None, "a planted check's source job is kept"
    receipt = decode_receipt(row.claim_body)
    streamed = tuple(t for c in job_rows.token_chunks(session, row.planted_from_job_id) for t in c.token_ids)
    return receipt, source[1], streamed[:receipt.completion_tokens]


def settle(session: Session, row: PeerCheckRecord, verdict: CheckVerdict, evidence: dict[str, object],
           signed: tuple[bytes, bytes], trust: TrustPolicy, now_ms: int) -> stakes.StakeTaken | None:
    """A planted check answered: nothing is paid; a checker whose answer passes the planted claim
    is caught (trust, stake, its fees of the horizon). The stake it lost, or None. The signed
    result (body, signature) is kept: it is what proves the checker passed a claim built to fail."""
    body, signature = signed
    assert row.planted and row.checker_node_id is not None and row.checker_operator_id is not None
    if not verdict.passed:
        reason = "rejected the planted claim, as every honest replay does; nothing paid for a planted check"
        moved = peer_store.update_peer_check(
            session, row.check_id, frozenset({PeerCheckStatus.ASSIGNED}), status=PeerCheckStatus.ANSWERED,
            passed=False, answered_at_ms=now_ms, reason=reason, result_body=body, result_signature=signature,
            evidence_json=json.dumps(evidence, sort_keys=True, default=str))
        assert moved, "read as assigned under its row lock"
        return None
    why = (f"answered that planted claim {row.job_id} matches, a claim built from verified job "
           f"{row.planted_from_job_id} with every committed value moved {TAMPER_UNITS} units: it did not "
           "replay the check")
    fees = peer_store.take_back_fees(session, row.checker_node_id, now_ms - trust.stake.clawback_horizon_s * 1000,
                                     row.check_id)
    moved = peer_store.update_peer_check(
        session, row.check_id, frozenset({PeerCheckStatus.ASSIGNED}), status=PeerCheckStatus.ANSWERED,
        passed=True, answered_at_ms=now_ms, reason=f"CAUGHT: {why}"[:outcomes.REASON_CHARS_MAX],
        result_body=body, result_signature=signature,
        evidence_json=json.dumps(evidence, sort_keys=True, default=str))
    assert moved, "read as assigned under its row lock"
    outcomes.count_checker_failure(session, row.checker_node_id, why, trust, now_ms)
    taken = stakes.take_checker_stake(session, row.checker_node_id, row.checker_operator_id, row.job_id, fees,
                                      trust.stake, now_ms)
    log.warning("checker %s caught by planted check %s: %d base units of fees taken back among %d clawed "
                "back and %d owed", row.checker_node_id, row.check_id, fees, taken.clawed_back, taken.owed)
    return taken
