"""Checks by peers, in the caller's transaction: hand a sampled job to a peer, judge its answer,
settle disputes, pay the checker.

- hand_over / dispatch: a waiting check the coordinator's own verifier cannot replay becomes a
  check job for a peer (checker_pool draws it as peers.choose_checker would); lapsed ones go to
  another peer, and a check no peer can take stays held with the reason (never paid unchecked).
- check_jobs_for: the check jobs a node's assignment stream sends it (prefill-only replays).
- accept_result: a checker's signed result, judged with the verifier's own judge(). A match
  posts the credit; a mismatch is a dispute, settled by a referee of a third operator (or the
  coordinator's verifier where it holds the model). The loser's trust falls.
- accept_failure: the checker could not replay it; another peer is asked.
- settle_refereed: the coordinator's own verifier decided a disputed job; the checker's answer is
  judged by it as by a peer referee.
Each answer that stands earns its checker a fee, one ledger transfer per check job. With a real
check, a checker is sometimes sent a planted one too (planted.py), which pays nothing and
catches a checker that answers "matches" without replaying.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.peer_checks import (
    CheckJob, CheckResult, CheckResultFormatError, decode_result, result_digest, signing_bytes,
)
from contracts.receipts import Receipt, decode_receipt, output_digest, prompt_digest
from contracts.signing import signature_is_valid
from contracts.token_checks import TokenSlack
from coordinator.errors import InvalidRequest, NotFound
from coordinator.model import NodeRecord
from coordinator.storage import job_rows, node_rows
from coordinator.verification import outcomes, peer_store, planted, store
from coordinator.verification.economics import StakePolicy
from coordinator.verification.judge import CheckVerdict, ReplayFacts, judge
from coordinator.verification.checker_pool import CheckerPool, Drawn
from coordinator.verification.peers import (
    Candidate, CheckRequest, Pairing, Party, PeerCheckPolicy, Role, Ruling, check_fee, fee_is_earned,
    job_passes, ruling, still_no_checker,
)
from coordinator.verification.peer_store import PeerCheckRecord, PeerCheckStatus, check_id_for
from coordinator.verification.policy import TrustPolicy
from coordinator.verification.store import CheckStatus
from coordinator.verification.tolerances import Tolerances
from ledger.api import JobStep, ResultCode, TransferState, get_transfer, job_transfer_id, pay_check_fee

log = logging.getLogger(__name__)

CHECKS_PER_PASS_MAX = 64
PAIRINGS_READ_MAX = 2_000  # the latest pairs checker selection remembers
CHECK_JOBS_PER_NODE_MAX = 16  # sent to one node's stream at once
_WAITING, _ASSIGNED = frozenset({PeerCheckStatus.WAITING}), frozenset({PeerCheckStatus.ASSIGNED})
_PEER = frozenset({CheckStatus.PEER})


@dataclass(frozen=True)
class PeerContext:
    policy: PeerCheckPolicy
    trust: TrustPolicy
    tolerances: Tolerances
    replayable: frozenset[tuple[str, str]]  # what the coordinator's own verifier holds
    draws: random.Random  # the coordinator's randomness: no node can predict its checker
    offline_after_ms: int


def _receipt(session: Session, job_id: str) -> Receipt:
    found = job_rows.receipt_of(session, job_id)
    assert found is not None and found[0] is not None, "checks open on jobs with a receipt"
    return decode_receipt(found[0])


def _new_row(check: store.CheckRecord, role: Role, attempt: int, now_ms: int, reason: str) -> PeerCheckRecord:
    return PeerCheckRecord(check_id_for(check.job_id, role, attempt), check.job_id, role, attempt,
                           check.node_id, check.operator_id, PeerCheckStatus.WAITING, now_ms, reason=reason)


# --- handing checks to peers -----------------------------------------------------

@dataclass
class DispatchPass:
    assigned: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (check id, node id)
    to_verifier: list[str] = dataclasses.field(default_factory=list)  # job ids the coordinator referees
    held: list[str] = dataclasses.field(default_factory=list)  # job ids no peer could check
    planted: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (check id, node id): planted.py


@dataclass
class _PassReads:
    """What one pass has read already: a receipt, and a check's operator credit (fixed when the
    check opens), are not read again for the same job in the pass, nor planting's sources
    (answered checks, which a dispatch pass never answers) for each checker."""

    receipts: dict[str, Receipt] = dataclasses.field(default_factory=dict)
    credits: dict[str, int] = dataclasses.field(default_factory=dict)
    planting_sources: planted.Sources | None = None  # read once a pass: the same for every checker

    def sources(self, session: Session) -> planted.Sources:
        if self.planting_sources is None:
            self.planting_sources = planted.read_sources(session)
        return self.planting_sources

    def receipt(self, session: Session, job_id: str) -> Receipt:
        if job_id not in self.receipts:
            self.receipts[job_id] = _receipt(session, job_id)
        return self.receipts[job_id]

    def credit(self, session: Session, job_id: str) -> int:
        if job_id not in self.credits:
            check = store.check_by_job(session, job_id)
            assert check is not None
            self.credits[job_id] = check.operator_credit
        return self.credits[job_id]


def dispatch(session: Session, context: PeerContext, now_ms: int) -> DispatchPass:
    """One pass: open check jobs for new waiting checks, re-ask lapsed ones, assign waiting ones."""
    done, reads = DispatchPass(), _PassReads()
    for check in store.waiting_checks(session, CHECKS_PER_PASS_MAX):
        receipt = reads.receipt(session, check.job_id)
        if (receipt.model_id, receipt.weights_digest) not in context.replayable:
            reads.credits[check.job_id] = check.operator_credit
            _hand_over(session, check, now_ms)
    for row in peer_store.overdue(session, now_ms, CHECKS_PER_PASS_MAX):
        if peer_store.update_peer_check(session, row.check_id, _ASSIGNED, status=PeerCheckStatus.LAPSED,
                                        reason=f"no answer from {row.checker_node_id} by the deadline"):
            _ask_again(session, row, context.policy, now_ms, done)
    waiting = peer_store.with_status(session, PeerCheckStatus.WAITING, CHECKS_PER_PASS_MAX)
    if waiting:
        _assign(session, waiting, context, now_ms, done, reads)
    return done


def _hand_over(session: Session, check: store.CheckRecord, now_ms: int) -> None:
    reason = "a peer that serves the same weights replays it"
    if store.update_check(session, check.job_id, frozenset({CheckStatus.WAITING}), status=CheckStatus.PEER,
                          reason=reason, verifier="peers"):
        peer_store.insert_peer_check(session, _new_row(check, Role.CHECK, 1, now_ms, "waiting for a peer"))


def _ask_again(session: Session, row: PeerCheckRecord, policy: PeerCheckPolicy, now_ms: int,
               done: DispatchPass) -> None:
    """The check lapsed: another peer is asked, up to attempts_max; then the credit stays held."""
    check = store.check_by_job(session, row.job_id)
    if check is None or check.status is not CheckStatus.PEER:
        return
    if row.attempt < policy.attempts_max:
        peer_store.insert_peer_check(session, _new_row(check, row.role, row.attempt + 1, now_ms,
                                                       "waiting for another peer"))
        return
    reason = (f"{row.attempt} peers did not answer its {row.role} in time; the credit stays held "
              "and the check is not retried")
    if store.update_check(session, row.job_id, _PEER, status=CheckStatus.QUARANTINED, reason=reason,
                          checked_at_ms=now_ms):
        done.held.append(row.job_id)
        log.warning("peer check of job %s given up: %s", row.job_id, reason)


def _candidates(session: Session, context: PeerContext, now_ms: int):  # type: ignore[no-untyped-def]
    trust = store.all_node_trust(session)
    return [Candidate(node.node_id, node.operator_id, node.served,
                      online=(node.left_at_ms is None and node.accepting_jobs
                              and now_ms - node.last_heartbeat_ms <= context.offline_after_ms),
                      quarantined=node.node_id in trust and trust[node.node_id].quarantined_at_ms is not None)
            for node in node_rows.all_peer_facts(session)]


def _request(session: Session, row: PeerCheckRecord, receipt: Receipt) -> CheckRequest:
    # A job's first check job has no earlier one to read: a second attempt follows a lapse, a
    # referee an answered check (check ids are unique per job, role and attempt).
    first = row.role is Role.CHECK and row.attempt == 1
    earlier = [] if first else [r for r in peer_store.of_job(session, row.job_id) if r.check_id != row.check_id]
    asked = frozenset(r.checker_node_id for r in earlier
                      if r.role is row.role and r.checker_node_id is not None)
    parties = tuple(Party(r.checker_node_id, r.checker_operator_id or "") for r in earlier
                    if r.role is Role.CHECK and r.status is PeerCheckStatus.ANSWERED
                    and r.checker_node_id is not None) if row.role is Role.REFEREE else ()
    return CheckRequest(receipt.model_id, receipt.weights_digest,
                        Party(row.checked_node_id, row.checked_operator_id), parties, asked)


def _assign(session: Session, waiting: list[PeerCheckRecord], context: PeerContext, now_ms: int,
            done: DispatchPass, reads: _PassReads) -> None:
    candidates = _candidates(session, context, now_ms)
    pool: CheckerPool | None = None  # built, with the pairings read, once a row may find a checker
    for row in waiting:
        # A check that found no checker among its own operator's nodes finds none again until the
        # fleet changes: re-reading its job every pass held the write lock from token streams.
        if row.role is Role.CHECK and still_no_checker(
                Party(row.checked_node_id, row.checked_operator_id), candidates, row.reason):
            continue
        if pool is None:
            pool = CheckerPool(candidates, peer_store.recent_pairings(session, PAIRINGS_READ_MAX), context.policy,
                               now_ms)
        receipt = reads.receipt(session, row.job_id)
        found = pool.choose(_request(session, row, receipt), context.draws)
        if isinstance(found, Drawn):
            reason = (f"sent to {found.node_id}, drawn at random among the eligible of the {found.serving} "
                      "nodes serving its weights")
            if peer_store.update_peer_check(session, row.check_id, _WAITING, status=PeerCheckStatus.ASSIGNED,
                                            checker_node_id=found.node_id, checker_operator_id=found.operator_id,
                                            assigned_at_ms=now_ms, deadline_ms=now_ms + context.policy.deadline_ms,
                                            reason=reason):
                pool.record(Pairing(row.checked_node_id, found.node_id, now_ms))
                done.assigned.append((row.check_id, found.node_id))
                _plant_beside(session, row, found, receipt, reads, context, now_ms, done)
            continue
        if row.role is Role.REFEREE and (receipt.model_id, receipt.weights_digest) in context.replayable:
            # No third peer: the coordinator's own verifier referees (it judges the checked node).
            peer_store.update_peer_check(session, row.check_id, _WAITING, status=PeerCheckStatus.LAPSED,
                                         reason="no third peer; the coordinator's verifier referees")
            store.update_check(session, row.job_id, _PEER, status=CheckStatus.WAITING,
                               reason="disputed; the coordinator's verifier referees")
            done.to_verifier.append(row.job_id)
        elif row.reason != found.reason:
            peer_store.update_peer_check(session, row.check_id, _WAITING, reason=found.reason)
            check = store.check_by_job(session, row.job_id)
            store.update_check(session, row.job_id, _PEER,
                               reason=_waiting_reason(check.reason if check else None, found.reason))


def _waiting_reason(current: str | None, found: str) -> str:
    """Why a check still waits for a peer. An escalated check keeps its cause in view: an auditor
    must still read why the coordinator's own replay gave no verdict."""
    cause = current[current.index(outcomes.ESCALATED):] if current and outcomes.ESCALATED in current else None
    return (f"{found}; {cause}" if cause else found)[:outcomes.REASON_CHARS_MAX]


def _plant_beside(session: Session, row: PeerCheckRecord, found: Drawn, receipt: Receipt, reads: _PassReads,
                  context: PeerContext, now_ms: int, done: DispatchPass) -> None:
    """Perhaps a planted check for the same checker, so it cannot skip the replay unseen."""
    planting = planted.Planting(found.node_id, found.operator_id, receipt.model_id, receipt.weights_digest,
                                reads.credit(session, row.job_id))
    check_id = planted.plant(session, planting, context.trust.stake, context.policy.deadline_ms, context.draws,
                             now_ms, reads.sources)
    if check_id is not None:
        done.planted.append((check_id, found.node_id))


# --- what a checker is sent ------------------------------------------------------

def check_jobs_for(session: Session, node_id: str, tolerances: Tolerances,
                   skip: Collection[str] = ()) -> list[CheckJob]:
    """The check jobs assigned to a node and not answered yet, less those whose check id is in
    skip (a stream has sent them: their job and tokens are not read again on each wake-up)."""
    found = []
    for row in peer_store.assigned_to(session, node_id, CHECK_JOBS_PER_NODE_MAX):
        if row.check_id in skip:
            continue
        receipt, prompt, output_ids = claim(session, row)
        found.append(CheckJob(row.check_id, row.job_id, receipt.model_id, receipt.weights_digest, prompt,
                              output_ids, receipt.finish_reason, receipt.temperature, receipt.top_p, receipt.seed,
                              TokenSlack(tolerances.logit_slack, tolerances.mass_slack)))
    return found


def claim(session: Session, row: PeerCheckRecord) -> tuple[Receipt, str, tuple[int, ...]]:
    """What a check is judged against: the receipt, prompt and output (a planted check's are built)."""
    if row.planted:
        return planted.claim_of(session, row)
    found = job_rows.receipt_of(session, row.job_id)
    assert found is not None and found[0] is not None
    body, prompt = found
    receipt = decode_receipt(body)
    streamed = tuple(t for c in job_rows.token_chunks(session, row.job_id) for t in c.token_ids)
    return receipt, prompt, streamed[:receipt.completion_tokens]


# --- a checker's answer ------------------------------------------------------------

@dataclass(frozen=True)
class ResultOutcome:
    accepted: bool  # False: the check had lapsed or was answered already
    job_id: str = ""
    decided: Ruling | None = None  # None: undecided (a referee is now needed) or not accepted
    verdict: outcomes.VerdictOutcome | None = None
    penalized_node_id: str | None = None  # a checker the referee contradicted, or a planted check caught
    planted: bool = False  # a planted check: nothing decided for any real job


def _mine(session: Session, checker: NodeRecord, check_id: str) -> PeerCheckRecord:
    row = peer_store.peer_check(session, check_id, for_update=True)
    if row is None or row.checker_node_id != checker.node_id:
        raise NotFound(f"check {check_id[:80]} is not assigned to this node")
    return row


def _read_result(checker: NodeRecord, row: PeerCheckRecord, receipt: Receipt, prompt: str,
                 output_ids: tuple[int, ...], body: bytes, signature: bytes) -> CheckResult:
    if not signature_is_valid(checker.public_key, signing_bytes(body), signature):
        raise InvalidRequest("result.signature does not verify with this node's registered key")
    try:
        result = decode_result(body)
    except CheckResultFormatError as error:
        raise InvalidRequest(f"result.body: {error}") from error
    expected = {"check_id": row.check_id, "job_id": row.job_id, "checker_node_id": checker.node_id,
                "model_id": receipt.model_id, "weights_digest": receipt.weights_digest,
                "prompt_digest": prompt_digest(prompt), "output_digest": output_digest(output_ids)}
    for field, value in expected.items():
        if getattr(result, field) != value:
            raise InvalidRequest(f"result.body {field} does not match the check job it answers")
    return result


def accept_result(session: Session, checker: NodeRecord, check_id: str, body: bytes, signature: bytes,
                  context: PeerContext, now_ms: int) -> ResultOutcome:
    row = _mine(session, checker, check_id)
    if row.status is not PeerCheckStatus.ASSIGNED:
        return ResultOutcome(False, row.job_id, planted=row.planted)
    receipt, prompt, output_ids = claim(session, row)
    result = _read_result(checker, row, receipt, prompt, output_ids, body, signature)
    verdict = judge(receipt, ReplayFacts(result.prompt_tokens, result.prompt, result.generated,
                                         result.token_checks), context.tolerances)
    evidence = {**verdict.evidence(), "checker": checker.node_id, "role": row.role.value,
                "result": result_digest(body)}
    if row.planted:
        taken = planted.settle(session, row, verdict, evidence, (body, signature), context.trust, now_ms)
        return ResultOutcome(True, row.job_id, penalized_node_id=None if taken is None else checker.node_id,
                             planted=True)
    moved = peer_store.update_peer_check(
        session, check_id, _ASSIGNED, status=PeerCheckStatus.ANSWERED, passed=verdict.passed,
        answered_at_ms=now_ms, result_body=body, result_signature=signature,
        reason="; ".join(verdict.reasons)[:outcomes.REASON_CHARS_MAX] or "replay matched",
        evidence_json=json.dumps(evidence, sort_keys=True))
    assert moved, "read as assigned under its row lock"
    answered = dataclasses.replace(row, status=PeerCheckStatus.ANSWERED, passed=verdict.passed)
    if row.role is Role.CHECK:
        decided = ruling(verdict.passed, None)
    else:
        decided = ruling(False, verdict.passed)  # a referee is only asked after a failed check
    if decided is None:
        _open_dispute(session, answered, verdict, now_ms)
        return ResultOutcome(True, row.job_id)
    return _settle(session, answered, decided, verdict, context, now_ms)


def _open_dispute(session: Session, row: PeerCheckRecord, verdict: CheckVerdict, now_ms: int) -> None:
    check = store.check_by_job(session, row.job_id)
    assert check is not None
    reason = (f"disputed: {row.checker_node_id}'s replay differs ({'; '.join(verdict.reasons)[:300]}); "
              "a referee of another operator decides")
    store.update_check(session, row.job_id, _PEER, reason=reason[:outcomes.REASON_CHARS_MAX])
    peer_store.insert_peer_check(session, _new_row(check, Role.REFEREE, 1, now_ms, "waiting for a referee"))
    log.info("job %s disputed by its checker %s; a referee decides", row.job_id, row.checker_node_id)


def _settle(session: Session, row: PeerCheckRecord, decided: Ruling, verdict: CheckVerdict,
            context: PeerContext, now_ms: int) -> ResultOutcome:
    """Apply the ruling: the job's verdict (credit, trust, audit, re-run), a lying checker's trust, fees."""
    if not store.update_check(session, row.job_id, _PEER, status=CheckStatus.WAITING):
        return ResultOutcome(True, row.job_id, decided)  # decided some other way meanwhile
    passes = job_passes(decided)
    assert passes == verdict.passed, "the standing verdict is the one applied"
    outcome = outcomes.record_verdict(session, row.job_id, verdict, f"peer {row.checker_node_id}",
                                      context.trust, now_ms)
    penalized = None
    rows = [r for r in peer_store.of_job(session, row.job_id) if r.status is PeerCheckStatus.ANSWERED]
    if decided is Ruling.CHECKER_LOSES:
        penalized = _penalize_liar(session, rows, f"referee {row.checker_node_id}", context.trust, now_ms)
    _pay_fees(session, rows, decided, passes, context.trust.stake, now_ms)
    return ResultOutcome(True, row.job_id, decided, outcome, penalized)


def _penalize_liar(session: Session, rows: list[PeerCheckRecord], referee: str, trust: TrustPolicy,
                   now_ms: int) -> str:
    """The checker whose "differs" the referee contradicted fails a check; its node id."""
    liar = next(r for r in rows if r.role is Role.CHECK and r.passed is False)
    assert liar.checker_node_id is not None
    outcomes.count_checker_failure(session, liar.checker_node_id, f"its check of job {liar.job_id} was "
                                   f"contradicted by {referee}", trust, now_ms)
    return liar.checker_node_id


def settle_refereed(session: Session, job_id: str, passed: bool, verifier: str, trust: TrustPolicy,
                    now_ms: int) -> str | None:
    """The coordinator's own verifier decided a job a peer had disputed: the checker's answer is
    judged by that verdict as by a referee's (trust when contradicted, its fee when it stands).
    The node id of a contradicted checker, or None."""
    rows = [r for r in peer_store.of_job(session, job_id) if r.status is PeerCheckStatus.ANSWERED]
    if not any(r.role is Role.CHECK and r.passed is False for r in rows):
        return None  # no dispute: the verifier checked it first, or a peer escalated
    decided = ruling(False, passed)
    assert decided is not None
    penalized = _penalize_liar(session, rows, verifier, trust, now_ms) if decided is Ruling.CHECKER_LOSES else None
    _pay_fees(session, rows, decided, job_passes(decided), trust.stake, now_ms)
    return penalized


def _pay_fees(session: Session, rows: list[PeerCheckRecord], decided: Ruling, job_passed: bool,
              policy: StakePolicy, now_ms: int) -> None:
    check = store.check_by_job(session, rows[0].job_id)
    assert check is not None
    fee_kept = job_passed and _fee_collected(session, check.job_id)
    amount = check_fee(check.operator_credit, policy)
    horizon_start_ms = now_ms - policy.clawback_horizon_s * 1000
    for row in rows:
        if not fee_is_earned(row.role, decided) or row.fee_transfer_id or row.checker_operator_id is None:
            continue
        if row.checker_node_id is not None and peer_store.caught_since(session, row.checker_node_id,
                                                                       horizon_start_ms):
            # The fee is the checker's stake on this check (economics.py): once caught lazy, it is not paid.
            log.warning("check fee of %s withheld: its checker %s was caught by a planted check",
                        row.check_id, row.checker_node_id)
            continue
        result = pay_check_fee(session, row.check_id, check.job_id, row.checker_operator_id, amount,
                               from_fees=fee_kept, now_us=now_ms * 1000)
        if result is not None and fee_kept and result.code is ResultCode.EXCEEDS_CREDITS:
            # The treasury is short (fees refunded meanwhile): the network pays, as for anonymous jobs.
            result = pay_check_fee(session, row.check_id, check.job_id, row.checker_operator_id, amount,
                                   from_fees=False, now_us=now_ms * 1000)
        if result is None:
            continue
        assert result.ok, f"ledger refused the fee of check {row.check_id}: {result.code}"
        peer_store.update_peer_check(session, row.check_id, frozenset({PeerCheckStatus.ANSWERED}),
                                     fee_base_units=amount, fee_transfer_id=result.id)


def _fee_collected(session: Session, job_id: str) -> bool:
    fee = get_transfer(session, job_transfer_id(job_id, JobStep.FEE))
    return fee is not None and fee.state is TransferState.POSTED


def accept_failure(session: Session, checker: NodeRecord, check_id: str, reason: str,
                   policy: PeerCheckPolicy, now_ms: int) -> bool:
    """The checker could not replay the job: another peer is asked (a failure is never a pass)."""
    row = _mine(session, checker, check_id)
    if not peer_store.update_peer_check(session, check_id, _ASSIGNED, status=PeerCheckStatus.LAPSED,
                                        answered_at_ms=now_ms, reason=f"the checker could not replay it: "
                                        f"{reason[:500]}"):
        return False
    _ask_again(session, row, policy, now_ms, DispatchPass())
    return True


def escalate(session: Session, job_id: str, reason: str, now_ms: int) -> bool:
    """The coordinator's own replay gave no verdict (it crashed, overran, or refused the input):
    a peer replays it instead, the credit held meanwhile ("cannot check" is never "paid")."""
    check = store.check_by_job(session, job_id, for_update=True)
    if check is None or check.status is not CheckStatus.WAITING:
        return False
    if not store.update_check(session, job_id, frozenset({CheckStatus.WAITING}), status=CheckStatus.PEER,
                              reason=f"{outcomes.ESCALATED} {reason}"[:outcomes.REASON_CHARS_MAX],
                              verifier="peers", checked_at_ms=now_ms):
        return False
    peer_store.insert_peer_check(session, _new_row(check, Role.CHECK, 1, now_ms,
                                                   "waiting for a peer: the coordinator's replay gave no verdict"))
    log.warning("check of job %s escalated to a peer, its credit held: %s", job_id, reason[:200])
    return True
