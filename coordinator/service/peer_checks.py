"""Checks by peers: hand sampled jobs to peer nodes, take their signed results, settle disputes."""

from __future__ import annotations

import logging

from contracts.peer_checks import CheckJob
from coordinator.live.notifier import job_topic, node_checks_topic, node_topic
from coordinator.model import NodeRecord
from coordinator.service.core import VERIFICATION_TOPIC, ServiceCore
from coordinator.verification import peer_checks, peer_store
from coordinator.verification.peer_checks import DispatchPass, PeerContext, ResultOutcome

log = logging.getLogger(__name__)


class PeerChecks:
    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def context(self) -> PeerContext:
        config = self._core.config
        return PeerContext(config.peer_checks, config.trust, config.tolerances, self._core.replayable(),
                           self._core.draws, config.node_offline_after_ms)  # type: ignore[arg-type]

    def dispatch(self) -> DispatchPass:
        """One pass: sampled jobs to peers, lapsed checks to other peers; wakes the checkers."""
        if not self._core.config.peer_checks.enabled:
            return DispatchPass()
        with self._core.db.transaction() as session:
            done = peer_checks.dispatch(session, self.context(), self._core.clock.now_ms())
        for check_id, node_id in done.assigned:
            log.info("check %s sent to peer %s", check_id, node_id)
        # Planted ones ride along; the checks' own topic says the stream must read check jobs.
        self._core.notifier.notify(*(topic for _, node_id in done.assigned
                                     for topic in (node_checks_topic(node_id), node_topic(node_id))))
        if done.to_verifier:
            self._core.notifier.notify(VERIFICATION_TOPIC)
        return done

    def check_jobs_for(self, node_id: str) -> list[CheckJob]:
        with self._core.db.read_transaction() as session:
            return peer_checks.check_jobs_for(session, node_id, self._core.config.tolerances)

    def accept_result(self, node: NodeRecord, check_id: str, body: bytes, signature: bytes) -> ResultOutcome:
        with self._core.db.transaction() as session:
            outcome = peer_checks.accept_result(session, node, check_id, body, signature, self.context(),
                                                self._core.clock.now_ms())
        if outcome.planted:
            if outcome.penalized_node_id:  # a lazy checker caught: its trust and stake changed
                self._core.fleet.note_changed([outcome.penalized_node_id])
                log.warning("checker %s caught by a planted check", outcome.penalized_node_id)
        elif outcome.decided is not None:
            touched = [node.node_id, *([outcome.verdict.node_id] if outcome.verdict else []),
                       *([outcome.penalized_node_id] if outcome.penalized_node_id else [])]
            self._core.fleet.note_changed(touched)  # trust, perhaps quarantine
            self._core.notifier.notify(job_topic(outcome.job_id))
            log.info("peer check of job %s decided: %s", outcome.job_id, outcome.decided.value)
            if outcome.verdict is not None and outcome.verdict.rerun_job_id:
                self._core.run_scheduler()
        elif outcome.accepted:
            self._core.notifier.notify(VERIFICATION_TOPIC)  # a dispute: the next pass finds a referee
        return outcome

    def accept_failure(self, node: NodeRecord, check_id: str, reason: str) -> bool:
        with self._core.db.transaction() as session:
            moved = peer_checks.accept_failure(session, node, check_id, reason, self._core.config.peer_checks,
                                               self._core.clock.now_ms())
        log.warning("peer %s could not run check %s: %s", node.node_id, check_id, reason[:200])
        self._core.notifier.notify(VERIFICATION_TOPIC)
        return moved

    def of_job(self, job_id: str) -> list[peer_store.PeerCheckRecord]:
        """Every check job of a job: who checked it, what each found, what each was paid."""
        with self._core.db.read_transaction() as session:
            return peer_store.of_job(session, job_id)
