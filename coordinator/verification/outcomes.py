"""What follows a receipt and a check, in the caller's transaction: credits, trust, re-runs.

- open_check: the job completed with a receipt that passed the door; its operator's credit
  is already held (ledger complete_job). Decide whether to replay it, record why.
- record_verdict: a replay passed (post the credit) or failed (void it, refund the consumer,
  cut the node's trust, audit its other held jobs, quarantine a repeat offender, and queue
  the job again for another node).
- release_due_credits: unchecked jobs whose window closed get their credit posted.

Every outcome is written to job_checks with its reason and evidence, so an operator can
see exactly why a job was or was not paid.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.ids import job_id_for_request
from coordinator.model import JobRecord, JobStatus, NodeRecord
from coordinator.money import job_money
from coordinator.storage import job_rows
from coordinator.verification import store
from coordinator.verification.judge import CheckVerdict
from coordinator.verification.policy import TrustPolicy, check_rate, is_quarantined, should_check
from coordinator.verification.store import CheckRecord, CheckStatus, CreditState, NodeTrust

log = logging.getLogger(__name__)

REASON_CHARS_MAX = 2_000


@dataclass(frozen=True)
class CheckContext:
    """What the service knows when a receipt arrives: policy, a fresh draw, who can replay."""

    policy: TrustPolicy
    draw: float  # uniform in [0, 1), never seen by the node
    replayable: frozenset[tuple[str, str]]  # (model id, weights digest) a verifier holds
    peers: bool = False  # peer nodes check what no verifier holds (verification/peer_checks.py)


def open_check(session: Session, job: JobRecord, node: NodeRecord, weights_digest: str,
               operator_credit: int, context: CheckContext, now_ms: int) -> CheckRecord:
    trust = store.node_trust_of(session, node.node_id)
    rate = check_rate(trust.record, context.policy)
    sampled = should_check(rate, context.draw)
    replayable = (job.model_id, weights_digest) in context.replayable
    if sampled and (replayable or context.peers):  # peers replay what no verifier here holds
        status, reason = CheckStatus.WAITING, None
    elif sampled:
        status, reason = CheckStatus.UNCHECKED, f"sampled, but no verifier holds {job.model_id}"
    else:
        status, reason = CheckStatus.UNCHECKED, f"not sampled (check rate {rate:.3f})"
    check = CheckRecord(
        job_id=job.job_id, node_id=node.node_id, operator_id=node.operator_id, status=status,
        check_rate=rate, sampled=sampled, operator_credit=operator_credit,
        credit_state=CreditState.PENDING if operator_credit else CreditState.POSTED,
        hold_until_ms=now_ms + context.policy.check_window_s * 1000, completed_at_ms=now_ms,
        reason=reason)
    store.insert_check(session, check)
    return check


@dataclass(frozen=True)
class VerdictOutcome:
    job_id: str
    node_id: str
    passed: bool
    rerun_job_id: str | None = None
    quarantined: bool = False
    audited_job_ids: tuple[str, ...] = ()


def _summary(verdict: CheckVerdict) -> str:
    return "; ".join(verdict.reasons)[:REASON_CHARS_MAX] if verdict.reasons else "replay matched"


def record_verdict(session: Session, job_id: str, verdict: CheckVerdict, verifier: str,
                   policy: TrustPolicy, now_ms: int) -> VerdictOutcome | None:
    """Apply a replay's verdict once; None if the check was already decided."""
    check = store.check_by_job(session, job_id, for_update=True)
    if check is None or check.status is not CheckStatus.WAITING:
        return None
    status = CheckStatus.PASSED if verdict.passed else CheckStatus.FAILED
    payment = (job_money.release_credit if verdict.passed else job_money.reject_credit)(session, job_id)
    # The credit is resolved only here or by release_due_credits, which skips waiting checks.
    assert payment.ok, f"ledger refused to settle the held credit of {job_id}: {payment.failure}"
    moved = store.update_check(
        session, job_id, frozenset({CheckStatus.WAITING}), status=status,
        credit_state=CreditState.POSTED if verdict.passed else CreditState.VOIDED,
        reason=_summary(verdict), evidence_json=json.dumps(verdict.evidence(), sort_keys=True),
        verifier=verifier, verifier_attempts=max(check.verifier_attempts, 1), checked_at_ms=now_ms,
        credit_resolved_at_ms=now_ms)
    assert moved, "the check was read as waiting in this transaction"
    trust = store.node_trust_of(session, check.node_id, for_update=True)
    record = trust.record.after(verdict.passed)
    quarantined = trust.quarantined_at_ms is not None
    newly_quarantined = not quarantined and is_quarantined(record, policy)
    store.save_node_trust(session, NodeTrust(
        check.node_id, record,
        now_ms if newly_quarantined else trust.quarantined_at_ms,
        f"failed {record.checks_failed} checks; last on job {job_id}" if newly_quarantined
        else trust.quarantine_reason), now_ms)
    if verdict.passed:
        return VerdictOutcome(job_id, check.node_id, True)
    audited = store.audit_unchecked(session, check.node_id)
    rerun = _queue_rerun(session, job_id, now_ms)
    if rerun is not None:
        store.update_check(session, job_id, frozenset({CheckStatus.FAILED}), rerun_job_id=rerun)
    log.warning("job %s failed its check on node %s: %s", job_id, check.node_id, _summary(verdict))
    return VerdictOutcome(job_id, check.node_id, False, rerun, newly_quarantined, tuple(audited))


def _queue_rerun(session: Session, job_id: str, now_ms: int) -> str | None:
    """The same job again, queued for another node; the network pays for it, not the consumer."""
    job = job_rows.job_by_id(session, job_id)
    if job is None:
        return None
    rerun_id = job_id_for_request(job.consumer_id, f"rerun:{job_id}")
    rerun = dataclasses.replace(
        job, job_id=rerun_id, request_id=None, status=JobStatus.QUEUED, created_at_ms=now_ms,
        strategy=None, layer_split=(), explanation_json=None, attempt=0, prompt_tokens=0,
        completion_tokens=0, receipt_body=None, receipt_signature=None, receipt_verified=False,
        credited_base_units=0, error=None, assigned_at_ms=None, started_at_ms=None,
        finished_at_ms=None, node_ids=())
    job_rows.insert_job(session, rerun)
    return rerun_id


def begin_replay(session: Session, job_id: str, verifier: str, now_ms: int) -> bool:
    """Record, before the replay runs, that it started: if it takes its process down, the
    check is quarantined at the next start instead of crashing it again."""
    check = store.check_by_job(session, job_id, for_update=True)
    if check is None or check.status is not CheckStatus.WAITING or check.verifier_attempts > 0:
        return False
    return store.update_check(session, job_id, frozenset({CheckStatus.WAITING}), verifier=verifier,
                              verifier_attempts=check.verifier_attempts + 1, checked_at_ms=now_ms)


def quarantine_check(session: Session, job_id: str, reason: str, verifier: str, now_ms: int) -> bool:
    """The replay crashed or gave no verdict: never run again, and the credit stays held."""
    moved = store.update_check(session, job_id, frozenset({CheckStatus.WAITING}),
                               status=CheckStatus.QUARANTINED, reason=reason[:REASON_CHARS_MAX],
                               verifier=verifier, checked_at_ms=now_ms)
    if moved:
        log.warning("check of job %s quarantined, its credit held: %s", job_id, reason[:200])
    return moved


def cannot_check(session: Session, job_id: str, reason: str, verifier: str, now_ms: int) -> bool:
    """The verifier could not replay the job: it is treated as unchecked (paid at window close)."""
    return store.update_check(session, job_id, frozenset({CheckStatus.WAITING}),
                              status=CheckStatus.UNCHECKED, reason=reason[:REASON_CHARS_MAX],
                              verifier=verifier, checked_at_ms=now_ms)


def release_due_credits(session: Session, now_ms: int, limit: int) -> list[str]:
    """Post the held credits of unchecked jobs whose check window has closed."""
    released = []
    due = store.due_credits(session, now_ms, min(limit, job_money.CREDITS_RELEASED_PER_CALL_MAX))  # the rest next pass
    # One ledger call for the whole pass: one lock, one read of the held credits, one write.
    payments = job_money.release_credits(session, [check.job_id for check in due])
    for check, payment in zip(due, payments, strict=True):
        assert payment.ok, f"ledger refused to release {check.job_id}: {payment.failure}"
        store.update_check(session, check.job_id, frozenset({CheckStatus.UNCHECKED}),
                           credit_state=CreditState.POSTED, credit_resolved_at_ms=now_ms)
        released.append(check.job_id)
    return released
