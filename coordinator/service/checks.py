"""Proof of completion: the verifier worker's replays, and what a job's or a node's checks found."""

from __future__ import annotations

import logging

from coordinator.live.notifier import job_topic
from coordinator.service.core import ServiceCore
from coordinator.verification import outcomes as check_outcomes
from coordinator.verification import store as check_store
from coordinator.verification.isolated import Checker, InProcessChecker
from coordinator.verification.replay_check import Replayer
from coordinator.verification.worker import VerifierWorker

log = logging.getLogger(__name__)

class Checks:
    """Sampled replay checks of finished jobs."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core
        self.verifier: VerifierWorker | None = None
        core.replayable = self.held_models

    def held_models(self) -> frozenset[tuple[str, str]]:
        """The (model id, digest) pairs this coordinator's verifier can replay; none without one."""
        return self.verifier.checker.held_models() if self.verifier is not None else frozenset()

    def attach_verifier(self, replayer: Replayer, name: str = "coordinator-verifier") -> None:
        """Replay sampled jobs with this replayer, in this process (tests and fakes; see run)."""
        self.attach_checker(InProcessChecker(replayer), name)

    def attach_checker(self, checker: Checker, name: str = "coordinator-verifier") -> None:
        """Check sampled jobs with this checker (a child process's replayer in production)."""
        self.verifier = VerifierWorker(self._core.db, self._core.clock, checker, self._core.config.trust,
                                       self._core.config.tolerances, name,
                                       peers=self._core.config.peer_checks.enabled)

    def run(self) -> list[check_outcomes.VerdictOutcome]:
        """Replay the waiting checks; post, or void and re-run, each job's held credit."""
        if self.verifier is None:
            return []
        decided = self.verifier.run_once()
        self._core.fleet.note_changed([*(d.node_id for d in decided),  # trust, perhaps quarantine
                                       *(d.penalized_checker_id for d in decided if d.penalized_checker_id)])
        self._core.notifier.notify(*(job_topic(d.job_id) for d in decided))
        if any(d.rerun_job_id for d in decided):
            self._core.run_scheduler()
        return decided

    def of_job(self, job_id: str) -> check_store.CheckRecord | None:
        """Whether a job was checked, how, and what happened to its credit, with the evidence."""
        with self._core.db.transaction() as session:
            return check_store.check_by_job(session, job_id)

    def of_node(self, node_id: str, limit: int = 100) -> tuple[check_store.NodeTrust,
                                                                   list[check_store.CheckRecord]]:
        """A node's trust record and its latest checks, newest first."""
        with self._core.db.transaction() as session:
            return (check_store.node_trust_of(session, node_id),
                    check_store.checks_for_node(session, node_id, min(limit, 1000)))
