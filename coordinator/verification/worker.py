"""The verifier worker: replays waiting checks and records their verdicts.

It runs in the coordinator process beside the gRPC services; its MLX engine (an
injected Checker) runs in a child process in production (verification/isolated.py),
so a job is never checked by the node that ran it and a replay that crashes costs
one check. Each check is read in one transaction, marked started in another,
replayed outside any transaction, and its verdict written in a third; a verdict is
applied at most once. A replay that crashed, overran or refused its input is
escalated (quarantined here) with its credit held; one that started and never finished
(it took a whole process down) is escalated when the next pass finds it, never retried
here. A job whose weights this verifier does not hold waits, held, for another checker.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.receipts import Receipt, ReceiptFormatError, decode_receipt
from coordinator.clock import Clock
from coordinator.storage import job_rows
from coordinator.storage.database import Database
from coordinator.verification import outcomes, peer_checks, store
from coordinator.verification.outcomes import VerdictOutcome
from coordinator.verification.policy import TrustPolicy
from coordinator.verification.isolated import REPLAY_TIMEOUT_S, Checker, ReplayFailed
from coordinator.verification.tolerances import Tolerances

log = logging.getLogger(__name__)

CHECKS_PER_PASS_MAX = 16
# Checks left to the peers (weights this verifier does not hold), remembered so that a pass,
# woken by every receipt, does not re-read their jobs and tokens each time.
LEFT_TO_PEERS_MAX = 10_000
# A replay started longer ago than this, with no verdict, took its process down.
REPLAY_ABANDONED_AFTER_MS = int(2 * REPLAY_TIMEOUT_S * 1000)
# How often a pass looks for them: every receipt wakes a pass, and each look was a transaction
# of its own per job; a replay abandoned 20 minutes ago can be found 10 s later.
ABANDONED_LOOK_INTERVAL_MS = 10_000


@dataclass(frozen=True)
class _Pending:
    job_id: str
    prompt: str
    streamed: tuple[int, ...]
    receipt: Receipt


class VerifierWorker:
    def __init__(self, db: Database, clock: Clock, checker: Checker, policy: TrustPolicy,
                 tolerances: Tolerances, name: str = "coordinator-verifier",
                 abandoned_after_ms: int = REPLAY_ABANDONED_AFTER_MS, peers: bool = False) -> None:
        self.db, self.clock = db, clock
        self.peers = peers  # checks of models this verifier does not hold are the peers' to run
        self.checker = checker
        self.policy, self.tolerances, self.name = policy, tolerances, name
        self.abandoned_after_ms = abandoned_after_ms
        # job id -> (model id, weights digest) of a waiting check left to the peers; looked at
        # again only if this verifier comes to hold those weights.
        self._left_to_peers: dict[str, tuple[str, str]] = {}
        self._next_abandoned_look_ms = 0  # the first pass looks: a restart is when they come to light

    def quarantine_abandoned(self) -> list[str]:
        """Quarantine checks whose replay started and never ended (it crashed a process)."""
        now = self.clock.now_ms()
        quarantined = []
        with self.db.transaction() as session:
            for check in store.started_checks(session, now - self.abandoned_after_ms, CHECKS_PER_PASS_MAX):
                if self._escalate(
                        session, check.job_id, "its replay started and never finished (the process "
                        "running it stopped); not retried here", now):
                    quarantined.append(check.job_id)
        return quarantined

    def _escalate(self, session: Session, job_id: str, reason: str, now_ms: int) -> bool:
        """No verdict from this verifier: a peer replays it when peer checks are on; else it stays
        quarantined here. Either way the credit stays held."""
        if self.peers:
            return peer_checks.escalate(session, job_id, f"{self.name}: {reason}", now_ms)
        return outcomes.quarantine_check(session, job_id, reason, self.name, now_ms)

    def _pending(self) -> list[_Pending]:
        with self.db.transaction() as session:
            found = []
            waiting = store.waiting_checks(session, CHECKS_PER_PASS_MAX)
            waiting_ids = {check.job_id for check in waiting}
            self._left_to_peers = {job_id: left for job_id, left in self._left_to_peers.items()
                                   if job_id in waiting_ids}
            for check in waiting:
                left = self._left_to_peers.get(check.job_id)
                if left is not None and self.checker.weights_digest(left[0]) != left[1]:
                    continue
                job = job_rows.receipt_of(session, check.job_id)
                assert job is not None and job[0] is not None, "checks open on completed jobs"
                receipt_body, prompt = job
                receipt = _decoded(check.job_id, receipt_body)
                if self._leave_to_peers(check.job_id, receipt):
                    continue  # its tokens are not read: a peer replays it
                streamed = tuple(t for c in job_rows.token_chunks(session, check.job_id) for t in c.token_ids)
                found.append(_Pending(check.job_id, prompt, streamed, receipt))
            return found

    def _leave_to_peers(self, job_id: str, receipt: Receipt) -> bool:
        """Whether a peer replays this job: peers are on and this verifier lacks its weights
        (remembered, so later passes read nothing of it)."""
        if not self.peers or self.checker.weights_digest(receipt.model_id) == receipt.weights_digest:
            return False
        if len(self._left_to_peers) < LEFT_TO_PEERS_MAX:
            self._left_to_peers[job_id] = (receipt.model_id, receipt.weights_digest)
        return True

    def run_once(self) -> list[VerdictOutcome]:
        """Replay every waiting check (up to CHECKS_PER_PASS_MAX); the verdicts applied."""
        decided = []
        now_ms = self.clock.now_ms()
        if now_ms >= self._next_abandoned_look_ms:
            self.quarantine_abandoned()
            self._next_abandoned_look_ms = now_ms + ABANDONED_LOOK_INTERVAL_MS
        for pending in self._pending():
            outcome = self._check(pending)
            if outcome is not None:
                decided.append(outcome)
        return decided

    def _check(self, pending: _Pending) -> VerdictOutcome | None:
        receipt = pending.receipt
        if self._leave_to_peers(pending.job_id, receipt):  # its weights went since _pending read it
            return None
        if self.checker.weights_digest(receipt.model_id) != receipt.weights_digest:
            with self.db.transaction() as session:
                outcomes.await_checker(session, pending.job_id,
                                       f"{self.name} does not hold {receipt.model_id} with these weights",
                                       self.name, self.clock.now_ms(), self.policy)
            return None
        with self.db.transaction() as session:
            if not outcomes.begin_replay(session, pending.job_id, self.name, self.clock.now_ms()):
                return None  # another worker took it
        try:
            # A partial receipt (a failed job's proof) covers its first tokens only.
            verdict = self.checker.check(receipt, pending.prompt,
                                         pending.streamed[:receipt.completion_tokens], self.tolerances)
        except ReplayFailed as failure:  # crashed, overran, or refused: no verdict, credit held
            with self.db.transaction() as session:
                self._escalate(session, pending.job_id, failure.reason, self.clock.now_ms())
            return None
        with self.db.transaction() as session:
            now_ms = self.clock.now_ms()
            outcome = outcomes.record_verdict(session, pending.job_id, verdict, self.name, self.policy, now_ms)
            if outcome is not None and self.peers:
                # A job a peer disputed: this verdict referees the peer's answer too.
                penalized = peer_checks.settle_refereed(session, pending.job_id, verdict.passed, self.name,
                                                        self.policy, now_ms)
                outcome = dataclasses.replace(outcome, penalized_checker_id=penalized)
        if outcome is not None:
            log.info("job %s %s its check%s", pending.job_id, "passed" if outcome.passed else "FAILED",
                     "" if outcome.passed else f": {'; '.join(verdict.reasons)}")
        return outcome


def _decoded(job_id: str, receipt_body: bytes) -> Receipt:
    try:
        return decode_receipt(receipt_body)
    except ReceiptFormatError as error:  # the door decoded it; a stored receipt cannot change
        raise AssertionError(f"stored receipt of {job_id} no longer decodes") from error
