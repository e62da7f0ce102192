"""service.spot_checks: challenge benchmarks for verified Macs at random times, and their answers.

The rules are coordinator/nodes/spot_benchmarks.py's; a challenge travels in the node's
assignment stream (NodeSessions.assignment_steps sends it and starts its clock). An answer
that fits in time waits for the verifier loop, which replays its signed tokens
(replay_answers); only then does the challenge pass.
"""

from __future__ import annotations

import logging
import random

from contracts.receipts import ReceiptFormatError, decode_receipt
from coordinator.errors import NotFound
from coordinator.jobs.receipt_check import check_receipt
from coordinator.live.notifier import node_challenges_topic, node_topic
from coordinator.model import NodeRecord, SignedReceipt, SpotChallenge
from coordinator.nodes import spot_benchmarks
from coordinator.service.core import VERIFICATION_TOPIC, ServiceCore
from coordinator.storage import challenge_rows
from coordinator.storage.challenge_rows import AnsweredChallenge
from coordinator.verification.isolated import Checker, ReplayFailed

log = logging.getLogger(__name__)

REPLAYS_PER_PASS_MAX = 16
# A replay that crashed or overran (the verifier's child, perhaps not the answer) is tried again
# on later passes for this long; after that the answer fails, so a crashing answer costs boundedly.
REPLAY_RETRY_MS = 3_600_000
_NO_VERDICT = "no verdict"


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
                challenge_rows.fail(session, challenge, now, spot_benchmarks.unanswered_problem(challenge))
            challenge_rows.drop_undelivered(session, now - spot_benchmarks.ANSWER_DEADLINE_MS, now)
            for node_id, model_id, claimed, never_judged in challenge_rows.candidates(
                    session, now - config.node_offline_after_ms):
                # A Mac never judged is challenged at once: until one passes it earns no bonus.
                if never_judged or spot_benchmarks.is_due(self._draws, config.challenge_pass_interval_s,
                                                          config.challenge_mean_interval_s):
                    challenge_rows.add(session, spot_benchmarks.new_challenge(
                        self._draws, node_id, model_id, claimed, now))
                    issued.append(node_id)
        for challenge in overdue:
            log.warning("node %s: %s", challenge.node_id, spot_benchmarks.unanswered_problem(challenge))
        if overdue:
            self._core.fleet.note_changed([c.node_id for c in overdue])
        if issued:
            self._core.notifier.notify(*(topic for node_id in issued
                                         for topic in (node_challenges_topic(node_id), node_topic(node_id))))
        return issued

    def answer(self, node: NodeRecord, challenge_id: str, token_ids: tuple[int, ...],
               receipt: SignedReceipt | None) -> str | None:
        """Judge the answer's timing and receipt now; None when they fit (its replay decides
        later), else why not (the node's hardware is only claimed until a later challenge passes)."""
        now = self._core.clock.now_ms()
        with self._core.db.transaction() as session:
            challenge = challenge_rows.by_id(session, challenge_id)
            if challenge is None or challenge.node_id != node.node_id or challenge.sent_at_ms is None:
                raise NotFound(f"no open challenge benchmark {challenge_id[:64]!r} for this node")
            verdict = None if receipt is None else check_receipt(
                receipt.body, receipt.signature, node.public_key, spot_benchmarks.expected_answer(
                    challenge, self._reference_digest(challenge, receipt.body), token_ids))
            problem = (spot_benchmarks.answer_problem(challenge, len(token_ids), now,
                                                      spot_benchmarks.ended_on_end_token(verdict))
                       or spot_benchmarks.receipt_problem(verdict))
            if problem is not None:
                challenge_rows.fail(session, challenge, now, problem)
            else:
                assert receipt is not None
                challenge_rows.await_replay(session, challenge, now, receipt.body, receipt.signature, token_ids)
        if problem:
            self._core.fleet.note_changed([node.node_id])
            log.warning("node %s failed a challenge benchmark: %s", node.node_id, problem)
        else:
            self._core.notifier.notify(VERIFICATION_TOPIC)
            log.info("node %s answered challenge benchmark %s in time; its replay decides", node.node_id,
                     challenge_id)
        return problem

    def _reference_digest(self, challenge: SpotChallenge, receipt_body: bytes) -> str:
        """The reference model's digest as this coordinator's verifier holds it. A coordinator
        that holds none takes the receipt's word here; its replay waits for one that holds it."""
        held = dict(self._core.replayable()).get(challenge.model_id)
        if held is not None:
            return held
        try:
            return decode_receipt(receipt_body).weights_digest
        except ReceiptFormatError:
            return ""  # (check_receipt reports the format error)

    def replay_answers(self, checker: Checker) -> list[str]:
        """Replay answers that fit in time (up to REPLAYS_PER_PASS_MAX); a verdict clears or sets
        the node's flag. Returns the nodes judged."""
        with self._core.db.transaction() as session:
            waiting = challenge_rows.awaiting_replay(session, REPLAYS_PER_PASS_MAX)
        judged = []
        for answered in waiting:
            if checker.weights_digest(answered.challenge.model_id) is None:
                continue  # another coordinator's verifier holds the reference model
            problem = self._replay(checker, answered)
            if problem is _NO_VERDICT:
                continue
            with self._core.db.transaction() as session:
                if not challenge_rows.record_replay(session, answered.challenge, problem,
                                                    self._core.clock.now_ms()):
                    continue  # another coordinator judged it first
            judged.append(answered.challenge.node_id)
            if problem:
                log.warning("node %s failed a challenge benchmark: %s", answered.challenge.node_id, problem)
            else:
                log.info("node %s passed challenge benchmark %s (replayed)", answered.challenge.node_id,
                         answered.challenge.challenge_id)
        if judged:
            self._core.fleet.note_changed(judged)
        return judged

    def _replay(self, checker: Checker, answered: AnsweredChallenge) -> str | None:
        receipt = decode_receipt(answered.receipt_body)  # (checked at the door)
        held = checker.weights_digest(answered.challenge.model_id)
        if held != receipt.weights_digest:
            return spot_benchmarks.unreplayable_problem(
                f"answered on weights {receipt.weights_digest[:80]!r}, not the reference model's {held!r}")
        try:
            verdict = checker.check(receipt, answered.challenge.prompt, answered.token_ids,
                                    self._core.config.tolerances)
        except ReplayFailed as failure:
            if failure.crashed and self._core.clock.now_ms() - answered.answered_at_ms < REPLAY_RETRY_MS:
                log.warning("challenge benchmark %s: its replay gave no verdict (%s); tried again later",
                            answered.challenge.challenge_id, failure.reason)
                return _NO_VERDICT
            return spot_benchmarks.unreplayable_problem(failure.reason)
        return spot_benchmarks.replay_problem(verdict)
