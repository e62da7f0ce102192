"""Planted checks catch a checker that answers "matches" without replaying, and never an honest one;
the coordinator's verifier, refereeing a dispute, judges the checker's answer too.

Real databases (SQLite and PostgreSQL), a fake clock and no MLX, as in test_peer_checks.py: an
honest checker's "replay" is the hidden states the job's node committed to (those of the job it
was built from, for a planted check: the same prompt and output), a lazy one forges values that
match whatever claim it is judged against (the strongest laziness: it answers "matches" to all).
"""

from __future__ import annotations

import collections
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.commitments import (
    QUANT_MAX, TOP_K, ActivationCommitment, TopCandidates, _positions, chunk_key, commit_chunk,
    decode_commitment, encode_commitment, evaluate,
)
from contracts.ids import JOB_ID_PREFIX, JobId, new_job_id
from contracts.peer_checks import CheckResult, encode_result, signing_bytes
from contracts.receipts import FinishReason, Receipt, output_digest, prompt_digest
from contracts.token_checks import TokenCheck
from coordinator.config import CoordinatorConfig
from coordinator.service import CoordinatorService
from coordinator.storage import node_rows
from coordinator.storage.database import Database, upgrade_schema
from coordinator.verification import peer_checks, peer_store
from coordinator.verification.judge import CheckVerdict, ReplayFacts, judge
from coordinator.verification.peer_store import PeerCheckRecord, PeerCheckStatus
from coordinator.verification.peers import Role, check_fee
from coordinator.verification.planted import PLANTED_NODE_ID, planted_claim, planted_job_id
from coordinator.verification.store import CheckStatus, CreditState
from coordinator.verification.tolerances import DEFAULT_TOLERANCES
from ledger.api import get_transfer
from mlxnet import checks_view
from node_agent.identity import Identity
from tests.coordinator.verification.test_outcomes import MODEL, FakeClock
from tests.coordinator.verification.test_peer_checks import (
    PEERS, PROMPT, TOKENS, TRUST, _answer, _assigned, _complete, _fleet, _operator, _posted, _states,
)

LAZY_CHECKS_MAX = 40  # a lazy checker is caught within this many answered checks (see the test)
WARM_UP_JOBS = 3  # checked honestly by all, before one checker turns lazy


# --- the claim: wrong for every honest replay, and shaped like a real one -------------------

def _receipt(job_id: str, prompt: TopCandidates, generated: tuple[TopCandidates, ...]) -> Receipt:
    commitment = ActivationCommitment(commit_chunk(prompt, chunk_key(job_id, 0)),
                                      tuple(commit_chunk(c, chunk_key(job_id, n + 1)) for n, c in enumerate(generated)))
    return Receipt(JobId(job_id), "node-x", MODEL.model_id, MODEL.weights_digest, prompt_digest(PROMPT), 0.0, 1.0,  # type: ignore[arg-type]
                   0, 8, output_digest(TOKENS), 2, len(TOKENS), 1, 2, encode_commitment(commitment),
                   FinishReason.END_TOKEN, 1)


def _replay(prompt: TopCandidates, generated: tuple[TopCandidates, ...], noise: float, seed: int) -> ReplayFacts:
    """An honest replay: the same states, each value off by at most `noise` of a quantization unit."""
    draws = random.Random(seed)

    def jitter(c: TopCandidates) -> TopCandidates:
        scale = max(abs(v) for v in c.values) / QUANT_MAX
        return TopCandidates(c.indices, tuple(v + draws.uniform(-noise, noise) * scale for v in c.values))

    steps = tuple(TokenCheck(i, t, True, t) for i, t in enumerate(TOKENS)) + (TokenCheck(3, -1, True, -1),)
    return ReplayFacts(2, jitter(prompt), tuple(jitter(c) for c in generated), steps)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.floats(0.0, 1.0), st.integers(0, 2**32))
def test_every_honest_replay_rejects_a_planted_claim(seed: int, noise: float, id_seed: int) -> None:
    prompt, generated = _states(seed)
    source = _receipt(new_job_id(), prompt, generated)
    job_id = planted_job_id(random.Random(id_seed))
    honest = _replay(prompt, generated, noise, seed)
    # The same replay passes the untampered claim (the test can fail) ...
    assert judge(_receipt(job_id, prompt, generated), honest, DEFAULT_TOLERANCES).passed
    # ... and fails the planted one, at every committed position of every chunk.
    verdict = judge(planted_claim(source, prompt, generated, job_id), honest, DEFAULT_TOLERANCES)
    assert not verdict.passed
    assert all(c.mismatched == c.compared == TOP_K for c in verdict.chunks)


def test_a_planted_job_id_is_shaped_as_a_real_one() -> None:
    real, planted = new_job_id(), planted_job_id(random.Random(1))
    assert planted.startswith(JOB_ID_PREFIX) and len(planted) == len(real)
    assert planted[len(JOB_ID_PREFIX) + 12] == real[len(JOB_ID_PREFIX) + 12] == "4"  # the uuid4 version nibble
    assert planted != planted_job_id(random.Random(2))


# --- the fleet --------------------------------------------------------------------------

def _forged(receipt: Receipt) -> tuple[TopCandidates, tuple[TopCandidates, ...]]:
    """Values a lazy checker makes up to match a claim's commitment exactly, without the model."""
    chunks = []
    for number, chunk in enumerate(decode_commitment(receipt.activation_commitment).chunks):
        key = chunk_key(receipt.job_id, number)
        indices, seen = [], set()
        for index in range(4 * TOP_K):
            position = int(_positions(key, np.array([index]))[0])
            if position not in seen:
                seen.add(position)
                indices.append(index)
            if len(indices) == TOP_K:
                break
        levels = evaluate(np.asarray(chunk.coefficients, dtype=np.int64), _positions(key, np.array(indices)))
        values = (levels - QUANT_MAX) / QUANT_MAX * 2.0**chunk.exponent
        chunks.append(TopCandidates(tuple(indices), tuple(float(v) for v in values)))
    return chunks[0], tuple(chunks[1:])


def _respond(service: CoordinatorService, nodes: dict[str, Identity], row: PeerCheckRecord, lazy: str,
             seeds: dict[str, int]):  # type: ignore[no-untyped-def]
    """The checker answers: the lazy one forges a match, the others replay (the states of the job
    whose prompt and output they were sent)."""
    assert row.checker_node_id is not None
    if row.checker_node_id != lazy:
        return _answer(service, nodes, row.check_id, row.checker_node_id, row.job_id,
                       seeds[row.planted_from_job_id or row.job_id])
    with service.db.transaction() as session:
        receipt, _, _ = peer_checks.claim(session, row)
        checker = node_rows.node_by_id(session, lazy)
    assert checker is not None
    prompt, generated = _forged(receipt)
    steps = tuple(TokenCheck(i, t, True, t) for i, t in enumerate(TOKENS)) + (TokenCheck(3, -1, True, -1),)
    body = encode_result(CheckResult(row.check_id, row.job_id, lazy, MODEL.model_id, MODEL.weights_digest,
                                     prompt_digest(PROMPT), output_digest(TOKENS), 2, prompt, generated, steps))
    return service.peers.accept_result(checker, row.check_id, body, nodes[lazy].sign(signing_bytes(body)))


def _all_rows(service: CoordinatorService) -> list[PeerCheckRecord]:
    with service.db.transaction() as session:
        return peer_store.with_status(session, PeerCheckStatus.ANSWERED, 10_000) + peer_store.with_status(
            session, PeerCheckStatus.ASSIGNED, 10_000)


def _fees_kept(service: CoordinatorService, node_id: str) -> int:
    return sum(r.fee_base_units for r in _all_rows(service)
               if r.checker_node_id == node_id and r.fee_transfer_id and r.fee_taken_back_by is None)


def _assigned_rows(service: CoordinatorService) -> list[PeerCheckRecord]:
    with service.db.transaction() as session:
        return peer_store.with_status(session, PeerCheckStatus.ASSIGNED, 10_000)


def _service(database_url: str, seed: int) -> CoordinatorService:
    upgrade_schema(database_url)
    config = CoordinatorConfig(database_url=database_url, trust=TRUST, peer_checks=PEERS)
    return CoordinatorService(Database(database_url), FakeClock(), config, draws=random.Random(seed))  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_lazy_checker_is_caught_and_an_honest_one_never_is(database_url: str, tmp_path: Path, seed: int,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    service = _service(database_url, seed)
    try:
        nodes = _fleet(service, tmp_path, ["alice", "bob", "carol", "dave"])
        seeds: dict[str, int] = {}
        lazy, answered_by_lazy, caught_at = "", 0, None
        runs: collections.Counter[str] = collections.Counter()
        checks: collections.Counter[str] = collections.Counter()
        honest_planted: set[str] = set()  # checkers other than the lazy one that were sent planted checks
        for job in range(200):
            job_id, runner = _complete(service, nodes, seed=1_000 * seed + job)
            seeds[job_id], runs[runner] = 1_000 * seed + job, runs[runner] + 1
            if job >= WARM_UP_JOBS and caught_at is None:
                # The busiest checker that is not the busiest runner is lazy. Placement may move its jobs
                # to another node at any time (and the runner is asked no checks), so the pick follows it
                # until the catch; a node lazy only on real checks answered them rightly and loses nothing.
                lazy = max(sorted(checks), key=lambda n: (n != runs.most_common(1)[0][0], checks[n]))
            service.peers.dispatch()
            for row in _assigned_rows(service):
                assert row.checker_node_id is not None
                checks[row.checker_node_id] += 1
                if row.planted and row.checker_node_id != lazy:
                    honest_planted.add(row.checker_node_id)
                fees_before = _fees_kept(service, lazy) if row.checker_node_id == lazy else 0
                outcome = _respond(service, nodes, row, lazy, seeds)
                assert outcome.accepted
                if row.checker_node_id == lazy and caught_at is None:
                    answered_by_lazy += 1
                    if outcome.penalized_node_id == lazy:
                        caught_at, caught_row, fees = answered_by_lazy, row, fees_before
                        kept_after_catch = _fees_kept(service, lazy)
            # Until the lazy one is caught and at least two honest checkers have met planted checks too.
            if caught_at is not None and job >= 30 and len(honest_planted - {lazy}) >= 2:
                break
        rows = _all_rows(service)
        planted = [r for r in rows if r.planted]
        # No planted check was paid, and none names a real claimant.
        assert all(r.fee_base_units == 0 and r.fee_transfer_id is None for r in planted)
        assert all(r.checked_node_id == PLANTED_NODE_ID for r in planted)
        # Each built from a verified job its checker never ran nor checked, and never sent to it twice.
        real = [r for r in rows if not r.planted]
        for row in planted:
            assert all(row.checker_node_id not in (r.checker_node_id, r.checked_node_id)
                       for r in real if r.job_id == row.planted_from_job_id)
        for node_id in nodes:
            sources = [r.planted_from_job_id for r in planted if r.checker_node_id == node_id]
            assert len(sources) == len(set(sources))
        # The lazy checker is caught within LAZY_CHECKS_MAX answers: in its first few checks it has
        # little at stake and about every other check it gets is planted (economics.planted_rate).
        assert caught_at is not None and caught_at <= LAZY_CHECKS_MAX, (caught_at, answered_by_lazy)
        assert caught_row.planted
        trust, _ = service.checks.of_node(lazy)
        assert trust.record.checks_failed >= 1
        with service.db.transaction() as session:
            caught = peer_store.peer_check(session, caught_row.check_id)
            taken = get_transfer(session, f"clawback:{caught_row.job_id}:taken")
            owed = get_transfer(session, f"clawback:{caught_row.job_id}:owed")
        assert caught is not None and caught.passed and (caught.reason or "").startswith("CAUGHT")
        # Every fee it had earned is taken back (from its balance, or as a debt), each only once.
        taken_back = (taken.amount if taken else 0) + (owed.amount if owed else 0)
        assert taken_back == fees  # none when caught before its first fee
        assert kept_after_catch == 0
        # Nor is it paid for any check settled after the catch: the fee was its stake (economics.py).
        assert _fees_kept(service, lazy) == 0
        # What an auditor reads: the planted checks the node answered, and why it was caught.
        assert checks_view._show_node(service.db, lazy) == 0
        shown = capsys.readouterr().out
        assert "planted checks answered" in shown and f"CAUGHT by planted check {caught_row.check_id}" in shown
        # Every honest checker rejected every planted claim, and was never penalized.
        assert len({r.checker_node_id for r in planted} - {lazy}) >= 2  # honest checkers were tested too
        for node_id in nodes:
            if node_id == lazy:
                continue
            assert all(r.passed is False for r in planted if r.checker_node_id == node_id and r.passed is not None)
            assert service.checks.of_node(node_id)[0].record.checks_failed == 0
    finally:
        service.db.dispose()


# --- the coordinator's verifier as referee -----------------------------------------------

class FakeChecker:
    """The coordinator's own verifier, holding the model; its verdict comes from the test."""

    def __init__(self, passed: bool) -> None:
        self.passed = passed

    def held_models(self) -> frozenset[tuple[str, str]]:
        return frozenset({(MODEL.model_id, MODEL.weights_digest)})

    def weights_digest(self, model_id: str) -> str | None:
        return MODEL.weights_digest

    def check(self, receipt: Receipt, prompt: str, output_ids: tuple[int, ...], tolerances: object) -> CheckVerdict:
        return CheckVerdict(self.passed, () if self.passed else ("tokens 0-2: 120 of 128 committed values differ",))


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    built = _service(database_url, 5)
    yield built
    built.db.dispose()


@pytest.mark.parametrize("job_is_honest", [True, False])
def test_the_coordinators_verifier_referees_the_checker_too(service: CoordinatorService, tmp_path: Path,
                                                            job_is_honest: bool) -> None:
    nodes = _fleet(service, tmp_path, ["alice", "bob"])  # no third operator to referee
    job_id, checked = _complete(service, nodes, seed=1)
    check_id, checker = _assigned(service, job_id, Role.CHECK)
    _answer(service, nodes, check_id, checker, job_id, seed=9)  # "differs"
    service.peers.dispatch()  # no referee of a third operator, and no verifier yet: it waits
    assert service.checks.of_job(job_id).status is CheckStatus.PEER  # type: ignore[union-attr]
    service.checks.attach_checker(FakeChecker(passed=job_is_honest))  # type: ignore[arg-type]
    assert service.peers.dispatch().to_verifier == [job_id]
    (decided,) = service.checks.run()
    check = service.checks.of_job(job_id)
    assert check is not None
    fee = check_fee(check.operator_credit, TRUST.stake)
    checker_trust = service.checks.of_node(checker)[0].record
    if job_is_honest:  # the checker's "differs" was a lie: it fails a check and is not paid
        assert check.credit_state is CreditState.POSTED and decided.penalized_checker_id == checker
        assert checker_trust.checks_failed == 1 and _posted(service, _operator(service, checker)) == 0
    else:  # the checker was right: the job fails, the checker is paid its fee
        assert check.credit_state is CreditState.VOIDED and decided.penalized_checker_id is None
        assert checker_trust.checks_failed == 0 and _posted(service, _operator(service, checker)) == fee > 0
        assert service.checks.of_node(checked)[0].record.checks_failed == 1
    (row,) = [r for r in service.peers.of_job(job_id) if r.role is Role.CHECK]
    assert (row.fee_transfer_id is not None) == (not job_is_honest)

