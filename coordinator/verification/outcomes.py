"""What follows a receipt and a check, in the caller's transaction: credits, trust, re-runs.

- open_check: the job completed with a receipt that passed the door; its operator's credit
  is already held (ledger complete_job). Decide whether to replay it, record why.
- record_verdict: a replay passed (post the credit) or failed (void it, refund the consumer,
  cut the node's trust, audit its other held jobs, quarantine a repeat offender, and queue
  the job again for another node).
- release_due_credits: unchecked jobs whose window closed get their credit posted; so do
  sampled jobs no checker could take, after the longer hold (economics.StakePolicy).
- A replay that gives no verdict escalates (quarantine_check) and a verifier without the
  weights hands the job on (await_checker): "cannot check" never means "paid".

Every outcome is written to job_checks with its reason and evidence, so an operator can
see exactly why a job was or was not paid.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.ids import job_id_for_request
from coordinator.model import JobRecord, JobStatus, NodeRecord
from coordinator.money import job_money
from coordinator.storage import job_rows
from coordinator.verification import store
from coordinator.verification.judge import CheckVerdict
from coordinator.verification import peer_store, stakes
from coordinator.verification.peer_store import PeerCheckStatus
from coordinator.verification.economics import Exposure, check_rate_for_job
from coordinator.verification.policy import TrustPolicy, check_rate, is_quarantined, should_check
from coordinator.verification.store import CheckRecord, CheckStatus, CreditState, NodeTrust

log = logging.getLogger(__name__)

REASON_CHARS_MAX = 2_000


@dataclass(frozen=True)
class CheckContext:
    """What the service knows when a receipt arrives: policy, a fresh draw, who can replay."""

    policy: TrustPolicy
    draw: float  # uniform in [0, 1), never seen by the node
    replayable: frozenset[tuple[str, str]]  # (model id, weights digest) the coordinator's verifier holds
    peers: bool = False  # peer nodes check what no verifier holds (verification/peer_checks.py)
    # (model id, weights digest) served by nodes of at least two operators, read in the receipt's
    # session: a peer can replay it (nodes.catalog.PeerCheckablePairs)
    peer_checkable: Callable[[Session], frozenset[tuple[str, str]]] = lambda session: frozenset()


def _hours(seconds: int) -> str:
    return f"{seconds / 3600:g} h"


def _no_checker(model_id: str, policy: TrustPolicy) -> str:
    return (f"no checker for {model_id} yet (no node of another operator serves these weights and the "
            f"coordinator holds no copy): held {_hours(policy.stake.unverifiable_hold_s)}, not "
            f"{_hours(policy.check_window_s)}")


def open_check(session: Session, job: JobRecord, node: NodeRecord, weights_digest: str,
               operator_credit: int, context: CheckContext, now_ms: int) -> CheckRecord:
    policy = context.policy
    trust = store.node_trust_of(session, node.node_id)
    exposure = Exposure(operator_credit, *store.node_exposure(
        session, node.node_id, now_ms - policy.check_window_s * 1000))
    rate = check_rate_for_job(check_rate(trust.record, policy), exposure, policy.stake)
    sampled = should_check(rate, context.draw)
    pair = (job.model_id, weights_digest)
    replayable = pair in context.replayable
    checkable = replayable or pair in context.peer_checkable(session)
    hold_s = policy.check_window_s if checkable else policy.stake.unverifiable_hold_s
    if sampled and (replayable or context.peers):  # peers replay what no verifier here holds
        status = CheckStatus.WAITING
        reason = None if checkable else f"sampled; {_no_checker(job.model_id, policy)}; a peer is sought meanwhile"
    elif sampled:  # held, never paid unchecked at the window's close: a checker may yet come
        status = CheckStatus.AWAITING_CHECKER
        reason = f"sampled (check rate {rate:.3f}), but {_no_checker(job.model_id, policy)}; paid then if none came"
    elif checkable:
        status, reason = CheckStatus.UNCHECKED, f"not sampled (check rate {rate:.3f})"
    else:
        status = CheckStatus.UNCHECKED
        reason = f"not sampled (check rate {rate:.3f}); {_no_checker(job.model_id, policy)}"
    check = CheckRecord(
        job_id=job.job_id, node_id=node.node_id, operator_id=node.operator_id, status=status,
        check_rate=rate, sampled=sampled, operator_credit=operator_credit,
        credit_state=CreditState.PENDING if operator_credit else CreditState.POSTED,
        hold_until_ms=now_ms + hold_s * 1000, completed_at_ms=now_ms, reason=reason)
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
    stake: stakes.StakeTaken | None = None  # what the failure cost the node beyond this job
    penalized_checker_id: str | None = None  # a peer whose "differs" this verdict contradicted


def _summary(verdict: CheckVerdict) -> str:
    return "; ".join(verdict.reasons)[:REASON_CHARS_MAX] if verdict.reasons else "replay matched"


def record_verdict(session: Session, job_id: str, verdict: CheckVerdict, verifier: str,
                   policy: TrustPolicy, now_ms: int) -> VerdictOutcome | None:
    """Apply a replay's verdict once; None if the check was already decided."""
    check = store.check_by_job(session, job_id, for_update=True)
    if check is None or check.status is not CheckStatus.WAITING:
        return None
    status = CheckStatus.PASSED if verdict.passed else CheckStatus.FAILED
    held = check.credit_state is CreditState.PENDING  # else forfeited as stake while it waited
    if held:
        payment = (job_money.release_credit if verdict.passed else job_money.reject_credit)(session, job_id)
        # The credit is resolved only here, by release_due_credits (which skips waiting checks)
        # or as stake (which marks it voided first).
        assert payment.ok, f"ledger refused to settle the held credit of {job_id}: {payment.failure}"
    credit_state = (CreditState.POSTED if verdict.passed else CreditState.VOIDED) if held else check.credit_state
    moved = store.update_check(
        session, job_id, frozenset({CheckStatus.WAITING}), status=status, credit_state=credit_state,
        reason=_summary(verdict) if held else f"{_summary(verdict)}; {check.reason}",
        evidence_json=json.dumps(verdict.evidence(), sort_keys=True),
        verifier=verifier, verifier_attempts=max(check.verifier_attempts, 1), checked_at_ms=now_ms,
        credit_resolved_at_ms=now_ms if held else check.credit_resolved_at_ms)
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
        if held:
            job_money.repay_debts(session, [(check.operator_id, job_id)])  # a claw-back's debt first
        return VerdictOutcome(job_id, check.node_id, True)
    forfeited = stakes.take_stake(session, check, policy.stake, now_ms)
    audited = store.audit_unchecked(session, check.node_id)
    rerun = _queue_rerun(session, job_id, now_ms)
    if rerun is not None:
        store.update_check(session, job_id, frozenset({CheckStatus.FAILED}), rerun_job_id=rerun)
    log.warning("job %s failed its check on node %s: %s", job_id, check.node_id, _summary(verdict))
    return VerdictOutcome(job_id, check.node_id, False, rerun, newly_quarantined, tuple(audited), forfeited)


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
    """The replay crashed, overran or refused (NaN, an id past the vocabulary): no verdict, so the
    credit stays held and the check escalates to another checker (never this one again, never
    paid unchecked). A crash is not evidence either way."""
    moved = store.update_check(session, job_id, frozenset({CheckStatus.WAITING}),
                               status=CheckStatus.QUARANTINED,
                               reason=(f"{ESCALATED} {reason}")[:REASON_CHARS_MAX],
                               verifier=verifier, checked_at_ms=now_ms)
    if moved:
        log.warning("check of job %s escalated, its credit held: %s", job_id, reason[:200])
    return moved


ESCALATED = "escalated to another checker, the credit held: the replay by this one gave no verdict:"


def await_checker(session: Session, job_id: str, reason: str, verifier: str, now_ms: int,
                  policy: TrustPolicy) -> bool:
    """The verifier cannot replay the job (it holds other weights, or none): the credit stays
    held for the longer hold, waiting for a checker that can; it is never paid at the window."""
    check = store.check_by_job(session, job_id, for_update=True)
    if check is None or check.status is not CheckStatus.WAITING:
        return False
    return store.update_check(
        session, job_id, frozenset({CheckStatus.WAITING}), status=CheckStatus.AWAITING_CHECKER,
        reason=(f"{reason}; held {_hours(policy.stake.unverifiable_hold_s)} for another checker")[:REASON_CHARS_MAX],
        verifier=verifier, checked_at_ms=now_ms,
        hold_until_ms=max(check.hold_until_ms, check.completed_at_ms + policy.stake.unverifiable_hold_s * 1000))


def release_due_credits(session: Session, now_ms: int, limit: int,
                        unverifiable_hold_s: int | None = None) -> list[str]:
    """Post the held credits of unchecked jobs whose check window has closed, and of sampled jobs
    no checker could take within the longer hold (their reason says so): with peer checks, those
    whose peer check was never taken by any peer, when unverifiable_hold_s is given."""
    released = []
    if unverifiable_hold_s is not None:
        _give_up_unclaimed(session, now_ms, unverifiable_hold_s, limit)
    due = store.due_credits(session, now_ms, min(limit, job_money.CREDITS_RELEASED_PER_CALL_MAX))  # the rest next pass
    # One ledger call for the whole pass: one lock, one read of the held credits, one write.
    payments = job_money.release_credits(session, [check.job_id for check in due])
    for check, payment in zip(due, payments, strict=True):
        assert payment.ok, f"ledger refused to release {check.job_id}: {payment.failure}"
        store.update_check(session, check.job_id, frozenset({check.status}),
                           credit_state=CreditState.POSTED, credit_resolved_at_ms=now_ms)
        released.append(check.job_id)
    job_money.repay_debts(session, [(check.operator_id, check.job_id) for check in due])
    return released


def _give_up_unclaimed(session: Session, now_ms: int, hold_s: int, limit: int) -> None:
    """Peer checks no peer ever took within the longer hold end: the check becomes
    awaiting_checker (released at once by the caller), its waiting peer rows lapse. One a peer
    took, answered or disputed, or that the verifier escalated, stays held until decided."""
    for check in store.unclaimed_peer_checks(session, now_ms - hold_s * 1000, limit):
        rows = peer_store.of_job(session, check.job_id)
        if not all(row.status is PeerCheckStatus.WAITING for row in rows):
            continue
        for row in rows:
            peer_store.update_peer_check(session, row.check_id, frozenset({PeerCheckStatus.WAITING}),
                                         status=PeerCheckStatus.LAPSED,
                                         reason=f"no peer took it within {_hours(hold_s)}")
        store.update_check(session, check.job_id, frozenset({CheckStatus.PEER}),
                           status=CheckStatus.AWAITING_CHECKER, hold_until_ms=now_ms,
                           reason=f"sampled, but no checker came: no peer took it within {_hours(hold_s)} "
                                  f"(no node of another operator serves these weights); released after "
                                  f"the longer hold")


def count_checker_failure(session: Session, node_id: str, why: str, policy: TrustPolicy, now_ms: int) -> bool:
    """A checker whose answer a referee contradicted, or that passed a planted claim, fails a check
    as a cheating node would; True when that takes it out of placement."""
    trust = store.node_trust_of(session, node_id, for_update=True)
    record = trust.record.after(False)
    newly = trust.quarantined_at_ms is None and is_quarantined(record, policy)
    store.save_node_trust(session, NodeTrust(
        node_id, record, now_ms if newly else trust.quarantined_at_ms,
        f"failed {record.checks_failed} checks; last: {why}" if newly else trust.quarantine_reason), now_ms)
    log.warning("checker %s failed a check: %s", node_id, why)
    return newly
