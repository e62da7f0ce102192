"""service.spot_checks: challenge benchmarks for verified Macs at random times, and their answers.

The rules are coordinator/nodes/spot_benchmarks.py's; a challenge travels in the node's
assignment stream (NodeSessions.assignment_steps sends it and starts its clock).
"""

from __future__ import annotations

import logging
import random

from coordinator.errors import NotFound
from coordinator.live.notifier import node_topic
from coordinator.nodes import spot_benchmarks
from coordinator.model import NodeRecord
from coordinator.service.core import ServiceCore
from coordinator.storage import challenge_rows

log = logging.getLogger(__name__)


class SpotChecks:
    def __init__(self, core: ServiceCore, draws: random.Random | None = None) -> None:
        self._core = core
        self._draws = draws or random.SystemRandom()  # when, and what: nothing a node can predict

    def issue_due(self) -> list[str]:
        """One pass: a challenge for each verified Mac whose random time came; an unanswered
        one past its deadline fails. Returns the nodes challenged."""
        config, now = self._core.config, self._core.clock.now_ms()
        issued: list[str] = []
        with self._core.db.transaction() as session:
            overdue = challenge_rows.overdue(session, now - spot_benchmarks.ANSWER_DEADLINE_MS)
            for challenge in overdue:
                challenge_rows.finish(session, challenge, now, spot_benchmarks.unanswered_problem(challenge))
            challenge_rows.drop_undelivered(session, now - spot_benchmarks.ANSWER_DEADLINE_MS, now)
            for node_id, model_id, claimed in challenge_rows.candidates(session, now - config.node_offline_after_ms):
                if spot_benchmarks.is_due(self._draws, config.challenge_pass_interval_s,
                                          config.challenge_mean_interval_s):
                    challenge_rows.add(session, spot_benchmarks.new_challenge(
                        self._draws, node_id, model_id, claimed, now))
                    issued.append(node_id)
        for challenge in overdue:
            log.warning("node %s: %s", challenge.node_id, spot_benchmarks.unanswered_problem(challenge))
        if overdue:
            self._core.fleet.note_changed([c.node_id for c in overdue])
        if issued:
            self._core.notifier.notify(*(node_topic(node_id) for node_id in issued))
        return issued

    def answer(self, node: NodeRecord, challenge_id: str, tokens_answered: int) -> str | None:
        """Judge the node's answer now; None when it passed, else why it failed (the node's
        hardware is only claimed again until a later challenge passes)."""
        now = self._core.clock.now_ms()
        with self._core.db.transaction() as session:
            challenge = challenge_rows.by_id(session, challenge_id)
            if challenge is None or challenge.node_id != node.node_id or challenge.sent_at_ms is None:
                raise NotFound(f"no open challenge benchmark {challenge_id[:64]!r} for this node")
            problem = spot_benchmarks.answer_problem(challenge, tokens_answered, now)
            challenge_rows.finish(session, challenge, now, problem)
        self._core.fleet.note_changed([node.node_id])
        if problem:
            log.warning("node %s failed a challenge benchmark: %s", node.node_id, problem)
        else:
            log.info("node %s passed challenge benchmark %s", node.node_id, challenge_id)
        return problem
