"""The verifier worker: replays waiting checks and records their verdicts.

It runs in the coordinator process beside the gRPC services, with its own MLX
engine (an injected Replayer), so a job is never checked by the node that ran it.
Each check is read in one transaction, replayed outside any transaction, and its
verdict written in another; a verdict is applied at most once, so two workers (or
a restart mid-replay) at worst repeat a replay.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from contracts.receipts import ReceiptFormatError, decode_receipt
from coordinator.clock import Clock
from coordinator.storage import job_rows
from coordinator.storage.database import Database
from coordinator.verification import outcomes, store
from coordinator.verification.outcomes import VerdictOutcome
from coordinator.verification.policy import TrustPolicy
from coordinator.verification.replay_check import Replayer, check_by_replay
from coordinator.verification.tolerances import Tolerances

log = logging.getLogger(__name__)

CHECKS_PER_PASS_MAX = 16


@dataclass(frozen=True)
class _Pending:
    job_id: str
    prompt: str
    streamed: tuple[int, ...]
    receipt_body: bytes


class VerifierWorker:
    def __init__(self, db: Database, clock: Clock, replayer: Replayer, policy: TrustPolicy,
                 tolerances: Tolerances, name: str = "coordinator-verifier") -> None:
        self.db, self.clock, self.replayer = db, clock, replayer
        self.policy, self.tolerances, self.name = policy, tolerances, name

    def _pending(self) -> list[_Pending]:
        with self.db.transaction() as session:
            found = []
            for check in store.waiting_checks(session, CHECKS_PER_PASS_MAX):
                job = job_rows.job_by_id(session, check.job_id)
                assert job is not None and job.receipt_body is not None, "checks open on completed jobs"
                streamed = tuple(t for c in job_rows.token_chunks(session, job.job_id) for t in c.token_ids)
                found.append(_Pending(job.job_id, job.prompt, streamed, job.receipt_body))
            return found

    def run_once(self) -> list[VerdictOutcome]:
        """Replay every waiting check (up to CHECKS_PER_PASS_MAX); the verdicts applied."""
        decided = []
        for pending in self._pending():
            outcome = self._check(pending)
            if outcome is not None:
                decided.append(outcome)
        return decided

    def _check(self, pending: _Pending) -> VerdictOutcome | None:
        try:
            receipt = decode_receipt(pending.receipt_body)
        except ReceiptFormatError as error:  # the door decoded it; a stored receipt cannot change
            raise AssertionError(f"stored receipt of {pending.job_id} no longer decodes") from error
        if self.replayer.weights_digest(receipt.model_id) != receipt.weights_digest:
            with self.db.transaction() as session:
                outcomes.cannot_check(session, pending.job_id,
                                      f"{self.name} does not hold {receipt.model_id} with these weights",
                                      self.name, self.clock.now_ms())
            return None
        try:
            # A partial receipt (a failed job's proof) covers its first tokens only.
            verdict = check_by_replay(self.replayer, receipt, pending.prompt,
                                      pending.streamed[:receipt.completion_tokens], self.tolerances)
        except ValueError as error:  # the model cannot be replayed here (unsupported, not finite)
            with self.db.transaction() as session:
                outcomes.cannot_check(session, pending.job_id, f"replay failed: {error}", self.name,
                                      self.clock.now_ms())
            return None
        with self.db.transaction() as session:
            outcome = outcomes.record_verdict(session, pending.job_id, verdict, self.name,
                                              self.policy, self.clock.now_ms())
        if outcome is not None:
            log.info("job %s %s its check%s", pending.job_id, "passed" if outcome.passed else "FAILED",
                     "" if outcome.passed else f": {'; '.join(verdict.reasons)}")
        return outcome

