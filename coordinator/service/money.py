"""The sweeps that settle money after the fact: ended jobs' reservations, credits whose check window closed."""

from __future__ import annotations

import logging

from contracts.ids import JobId
from coordinator.live.notifier import job_topic
from coordinator.money import job_money
from coordinator.service.core import ServiceCore
from coordinator.storage import job_rows
from coordinator.verification import outcomes as check_outcomes
from ledger.api import QUEUE_BATCH_MAX

log = logging.getLogger(__name__)

POSTING_BATCH_MAX = QUEUE_BATCH_MAX

class Money:
    """Settling what jobs left open."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def post_completions(self) -> int:
        """The postings loop's pass: post what receipts queued, a group commit a batch, until
        a batch comes back short (ledger.posting_queue). Returns the completions posted."""
        total = 0
        while True:
            self._core.completions_queued.clear()  # a receipt committed after this is posted next pass
            with self._core.db.transaction() as session:
                posted = job_money.post_completions(session)
            done = len(posted.posted) + len(posted.refused)
            total += len(posted.posted)
            if done < POSTING_BATCH_MAX:
                return total

    def release_due_credits(self) -> list[str]:
        """Post the held credits of unchecked jobs whose check window has closed."""
        now = self._core.clock.now_ms()
        limit = self._core.config.credits_released_per_pass_max
        with self._core.db.transaction() as session:
            released = check_outcomes.release_due_credits(
                session, now, limit,
                self._core.config.trust.stake.unverifiable_hold_s if self._core.config.peer_checks.enabled
                else None)
        self._core.credit_due.passed(now, len(released), min(limit, job_money.CREDITS_RELEASED_PER_CALL_MAX))
        self._core.notifier.notify(*(job_topic(j) for j in released))
        return released

    def release_credits_when_due(self) -> list[str]:
        """The credits loop's pass: release_due_credits once a hold this process opened has
        ended or the sweep interval has passed; otherwise nothing, not even a transaction."""
        if not self._core.credit_due.due(self._core.clock.now_ms()):
            return []
        return self.release_due_credits()

    def close_billing(self, job_id: str) -> bool:
        """Resolve one ended job's reservation now rather than at the next sweep."""
        with self._core.db.transaction() as session:
            job = job_rows.job_by_id(session, job_id)
            return job is not None and job_money.close_job(session, job, self._core.clock.now_ms())

    def close_ended(self) -> list[JobId]:
        """Resolve the reservations of jobs that ended (see coordinator.money.job_money)."""
        with self._core.db.transaction() as session:
            return job_money.close_ended_jobs(session, self._core.clock.now_ms())
