"""Ending a job as failed, its money settled in the same write of its row.

Every way a job fails (the consumer cancels, its node reports a failure, its node goes away
mid-stream) ends here: the row is locked, the reservation settled (coordinator.money.job_money),
and the row written once with the failure and the close.

A failed job charges only tokens its consumer received, and pays its operator only for tokens
a verified partial receipt proves (contracts.receipts: finish reason CUT_OFF), the credit held
for a check like a completion's. A stream (gRPC, an HTTP stream) received every stored token;
a whole answer (a non-streaming HTTP request) received nothing, unless the gateway returned its
text at a stop sequence. A node that streams made-up tokens and sends no receipt earns nothing.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy.orm import Session

from coordinator.jobs.receipt_check import ExpectedJob, check_receipt
from coordinator.model import (
    DELIVERY_STREAM, ERROR_STOP_SEQUENCE, TERMINAL_STATUSES, JobRecord, JobStatus, NodeRecord,
)
from coordinator.money import job_money
from coordinator.storage import job_rows, node_rows
from coordinator.verification import outcomes
from coordinator.verification.outcomes import CheckContext


def delivered_tokens(job: JobRecord, stored_tokens: int) -> int:
    """Tokens the job's consumer received: a stream saw each stored token as it came, and a
    whole answer saw none unless its text was returned (it ended at a stop sequence)."""
    if job.delivery == DELIVERY_STREAM or job.error_code == ERROR_STOP_SEQUENCE:
        return stored_tokens
    return 0


@dataclasses.dataclass(frozen=True)
class _Proof:
    node: NodeRecord
    work: job_money.ProvenWork
    weights_digest: str


def _proof(session: Session, job: JobRecord) -> _Proof | None:
    """The job's partial receipt, if it verifies against the stored tokens, clipped to what
    the consumer received; None when it proves nothing delivered."""
    if job.partial_receipt_body is None or job.partial_receipt_signature is None or not job.node_ids:
        return None
    node = node_rows.node_by_id(session, job.node_ids[0])
    spec = node.model(job.model_id) if node is not None else None
    if node is None or spec is None:
        return None
    streamed = tuple(t for c in job_rows.token_chunks(session, job.job_id) for t in c.token_ids)
    expected = ExpectedJob(
        job_id=job.job_id, node_id=node.node_id, model_id=job.model_id,
        weights_digest=spec.weights_digest, prompt=job.prompt, temperature=job.temperature,
        top_p=job.top_p, seed=job.seed, max_tokens=job.max_tokens, streamed_token_ids=streamed)
    verdict = check_receipt(job.partial_receipt_body, job.partial_receipt_signature,
                            node.public_key, expected, partial=True)
    if not verdict.ok:
        return None
    assert verdict.receipt is not None
    tokens = min(verdict.receipt.completion_tokens, delivered_tokens(job, len(streamed)))
    if tokens == 0:
        return None
    work = job_money.ProvenWork(node.operator_id, spec, verdict.receipt.prompt_tokens, tokens)
    return _Proof(node, work, spec.weights_digest)


def fail_job(session: Session, job_id: str, now_ms: int, *, error: str, context: CheckContext,
             error_code: str | None = None) -> JobRecord | None:
    """Fail the job unless it already ended; returns it as it was before, or None if it had ended.

    context decides whether a proven part's held credit is checked by replay."""
    job = job_rows.job_by_id(session, job_id, for_update=True)  # its row before the ledger, always
    if job is None or job.status in TERMINAL_STATUSES:
        return None
    ending = dataclasses.replace(job, error_code=error_code or job.error_code)
    proof = _proof(session, ending)
    settled = job_money.settle_failed(session, job, None if proof is None else proof.work,
                                      hold_s=context.policy.check_window_s)
    ended: dict = dict(status=JobStatus.FAILED, error=error, error_code=error_code,
                       finished_at_ms=now_ms,
                       billing_closed_at_ms=now_ms if settled.billing_closed else None)
    if proof is not None and settled.price is not None:
        ended.update(prompt_tokens=proof.work.prompt_tokens,
                     completion_tokens=proof.work.completion_tokens,
                     receipt_body=job.partial_receipt_body,
                     receipt_signature=job.partial_receipt_signature, receipt_verified=True,
                     credited_base_units=settled.price.operator_credit)
    moved = job_rows.transition_job(session, job_id, frozenset({job.status}), **ended)
    assert moved, "the job's row is locked by this transaction"
    if proof is not None and settled.price is not None:
        outcomes.open_check(session, dataclasses.replace(job, **ended), proof.node,
                            proof.weights_digest, settled.price.operator_credit, context, now_ms)
    return job
