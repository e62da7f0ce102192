"""Checks by peers through the service: a check job in the checker's assignment stream, its signed
result judged with the verifier's judge, disputes settled by a referee, fees paid.

Real databases (SQLite and PostgreSQL), a fake clock and no MLX: each checker's "replay" is the
hidden-state candidates the test committed to (an honest one) or others (a cheat, a liar).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.commitments import (
    ActivationCommitment, TopCandidates, chunk_key, commit_chunk, encode_commitment, generated_chunk_count,
)
from contracts.ids import JobId, OperatorId
from contracts.peer_checks import CheckJob, CheckResult, encode_result, signing_bytes
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from contracts.token_checks import TokenCheck
from coordinator.config import CoordinatorConfig
from coordinator.errors import InvalidRequest
from coordinator.jobs.submission import Submission
from coordinator.live.notifier import Wait, node_topic
from coordinator.model import TokenChunk
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows, node_rows
from coordinator.storage.database import Database, upgrade_schema
from coordinator.verification import peer_checks
from coordinator.verification.peer_store import PeerCheckStatus
from coordinator.verification.peers import PeerCheckPolicy, Role, check_fee
from coordinator.verification.store import CheckStatus, CreditState
from coordinator.verification.worker import ABANDONED_LOOK_INTERVAL_MS
from ledger.api import TransferKind, balance, check_fee_transfer_id, get_transfer, operator_account_id
from node_agent.identity import Identity, load_or_create_identity
from tests.coordinator.statements import statements_run
from tests.coordinator.verification.test_outcomes import HARDWARE, MODEL, POLICY, FakeClock
from tests.node_registration import register_node

TOKENS = (5, 6, 7)
PROMPT = "Hello"
PEERS = PeerCheckPolicy(pair_memory_checks=0, deadline_ms=60_000, attempts_max=2)
# Work has a cost here (kappa), so a checker earns a fee (economics.checker_fee_bps); no stake is taken.
TRUST = dataclasses.replace(POLICY, stake=dataclasses.replace(POLICY.stake, work_cost_share_max=0.4))


class Draws(random.Random):
    """random() decides sampling (0.0: every job is checked); randrange stays seeded."""

    def __init__(self) -> None:
        super().__init__(5)
        self.next = 0.0

    def random(self) -> float:
        return self.next


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    upgrade_schema(database_url)
    db = Database(database_url)
    config = CoordinatorConfig(database_url=database_url, trust=TRUST, peer_checks=PEERS)
    yield CoordinatorService(db, FakeClock(), config, draws=Draws())  # type: ignore[arg-type]
    db.dispose()


def _fleet(service: CoordinatorService, tmp_path: Path, operators: list[str]) -> dict[str, Identity]:
    """One node per name; a name is 'operator' or 'operator-n' for a second node of one operator."""
    nodes = {}
    for name in operators:
        identity = load_or_create_identity(tmp_path / f"{name}.pem")
        register_node(service, identity, HARDWARE, (MODEL,), name.split("-")[0], display_name=name,
                      max_concurrent_jobs=4)
        nodes[identity.node_id] = identity
    return nodes


def _candidates(seed: int, count: int = 150, width: int = 4096) -> TopCandidates:
    draws = random.Random(seed)
    indices = draws.sample(range(width), count)
    return TopCandidates(tuple(indices), tuple(draws.uniform(-4, 4) for _ in indices))


def _states(seed: int) -> tuple[TopCandidates, tuple[TopCandidates, ...]]:
    return _candidates(seed), tuple(_candidates(seed * 100 + n) for n in range(generated_chunk_count(len(TOKENS))))


def _complete(service: CoordinatorService, nodes: dict[str, Identity], seed: int) -> tuple[str, str]:
    """A job run by whichever node it lands on, committed to the states of `seed`: (job id, node id)."""
    job = service.jobs.submit(Submission(consumer_id="c", model_id=MODEL.model_id, prompt=PROMPT, max_tokens=8,
                                         temperature=0.0, top_p=1.0, seed=0, request_id="",
                                         min_decode_tokens_per_s=0.0, api_key_id=None), None).job
    with service.db.transaction() as session:
        node_id = job_rows.job_by_id(session, job.job_id).node_ids[0]  # type: ignore[union-attr]
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, TOKENS, "abc"), prompt_tokens=2)
    prompt, generated = _states(seed)
    commitment = ActivationCommitment(commit_chunk(prompt, chunk_key(job.job_id, 0)),
                                      tuple(commit_chunk(c, chunk_key(job.job_id, n + 1))
                                            for n, c in enumerate(generated)))
    now = service.clock.now_ms()
    receipt = Receipt(JobId(job.job_id), node.node_id, MODEL.model_id, MODEL.weights_digest,
                      prompt_digest(PROMPT), 0.0, 1.0, 0, 8, output_digest(TOKENS), 2, len(TOKENS), now, now,
                      encode_commitment(commitment), FinishReason.END_TOKEN, now)
    body = encode_receipt(receipt)
    service.nodes.accept_receipt(node, job.job_id, body, nodes[node.node_id].sign(body))
    return job.job_id, node.node_id


def _assigned(service: CoordinatorService, job_id: str, role: Role) -> tuple[str, str]:
    """(check id, checker node id) of the job's assigned check job of that role, after a pass."""
    service.peers.dispatch()
    rows = [r for r in service.peers.of_job(job_id) if r.role is role and r.status is PeerCheckStatus.ASSIGNED]
    assert len(rows) == 1, service.peers.of_job(job_id)
    assert rows[0].checker_node_id is not None
    return rows[0].check_id, rows[0].checker_node_id


def _answer(service: CoordinatorService, nodes: dict[str, Identity], check_id: str, checker_id: str,
            job_id: str, seed: int):  # type: ignore[no-untyped-def]
    """The checker reports the states of `seed` (the job's own seed: an honest replay)."""
    prompt, generated = _states(seed)
    steps = tuple(TokenCheck(i, t, True, t) for i, t in enumerate(TOKENS)) + (TokenCheck(3, -1, True, -1),)
    result = CheckResult(check_id, job_id, checker_id, MODEL.model_id, MODEL.weights_digest,
                         prompt_digest(PROMPT), output_digest(TOKENS), 2, prompt, generated, steps)
    body = encode_result(result)
    with service.db.transaction() as session:
        checker = node_rows.node_by_id(session, checker_id)
    assert checker is not None
    return service.peers.accept_result(checker, check_id, body, nodes[checker_id].sign(signing_bytes(body)))


def _operator(service: CoordinatorService, node_id: str) -> str:
    with service.db.transaction() as session:
        return node_rows.node_by_id(session, node_id).operator_id  # type: ignore[union-attr]


def _posted(service: CoordinatorService, operator: str) -> int:
    with service.db.transaction() as session:
        found = balance(session, operator_account_id(OperatorId(operator)))
        return found.net_posted if found else 0


def test_a_peer_checks_the_job_in_its_assignment_stream_and_is_paid(service: CoordinatorService,
                                                                    tmp_path: Path) -> None:
    nodes = _fleet(service, tmp_path, ["alice", "bob"])
    job_id, checked = _complete(service, nodes, seed=1)
    check_id, checker = _assigned(service, job_id, Role.CHECK)
    assert checker != checked
    with service.db.transaction() as session:
        checker_node = node_rows.node_by_id(session, checker)
    steps = service.nodes.assignment_steps(checker_node)  # type: ignore[arg-type]
    sent = next(step for step in steps if not isinstance(step, Wait))
    assert isinstance(sent, CheckJob) and (sent.check_id, sent.job_id) == (check_id, job_id)
    assert sent.prompt == PROMPT and sent.output_ids == TOKENS and sent.finish_reason is FinishReason.END_TOKEN
    outcome = _answer(service, nodes, check_id, checker, job_id, seed=1)
    assert outcome.accepted and outcome.verdict is not None and outcome.verdict.passed
    check = service.checks.of_job(job_id)
    assert check is not None and check.status is CheckStatus.PASSED and check.credit_state is CreditState.POSTED
    assert check.verifier == f"peer {checker}"
    fee = check_fee(check.operator_credit, TRUST.stake)
    assert fee > 0 and _posted(service, _operator(service, checker)) == fee
    with service.db.transaction() as session:
        transfer = get_transfer(session, check_fee_transfer_id(check_id))
    assert transfer is not None and transfer.kind is TransferKind.CHECK_FEE and transfer.amount == fee
    assert transfer.job_id == job_id
    (row,) = service.peers.of_job(job_id)
    assert row.status is PeerCheckStatus.ANSWERED and row.passed and row.fee_base_units == fee
    # An answer to a check already answered is not taken twice, and pays nothing more.
    assert not _answer(service, nodes, check_id, checker, job_id, seed=1).accepted
    assert _posted(service, _operator(service, checker)) == fee


def test_with_a_relay_a_stream_reads_check_jobs_when_their_topic_moves_and_the_sweep_catches_a_silent_one(
        service: CoordinatorService, tmp_path: Path) -> None:
    service.notifier.set_relayed(True)  # as server.py does on SQLite, and on PostgreSQL with the relay up
    nodes = _fleet(service, tmp_path, ["alice", "bob"])
    streams = {}
    for node_id in nodes:
        with service.db.transaction() as session:
            streams[node_id] = service.nodes.assignment_steps(node_rows.node_by_id(session, node_id))  # type: ignore[arg-type]
        assert isinstance(next(streams[node_id]), Wait)  # nothing for it yet
    job_id, checked = _complete(service, nodes, seed=1)
    check_id, checker = _assigned(service, job_id, Role.CHECK)  # the pass notifies the checks' topic
    while isinstance(step := next(streams[checker]), Wait):  # a wake-up per job step came first
        pass
    assert isinstance(step, CheckJob) and step.check_id == check_id
    assert isinstance(next(streams[checker]), Wait)
    # A check assigned with a wake-up that names only the node (an older coordinator's relay) is
    # not read on that wake-up; the sweep, the relay's safety net, brings it.
    second_job_id, _ = _complete(service, nodes, seed=2)
    for stream in streams.values():
        while not isinstance(next(stream), Wait):
            pass
    with service.db.transaction() as session:
        peer_checks.dispatch(session, service.peers.context(), service.clock.now_ms())
    (row,) = [r for r in service.peers.of_job(second_job_id) if r.status is PeerCheckStatus.ASSIGNED]
    assert row.checker_node_id is not None
    service.notifier.notify_local(node_topic(row.checker_node_id))
    assert isinstance(next(streams[row.checker_node_id]), Wait)
    assert service.nodes.sweep_streams() >= 1
    sent = next(streams[row.checker_node_id])
    assert isinstance(sent, CheckJob) and sent.check_id == row.check_id


def test_a_pass_reads_planting_sources_once_and_no_earlier_check_jobs_of_first_checks(
        service: CoordinatorService, tmp_path: Path) -> None:
    nodes = _fleet(service, tmp_path, ["alice", "bob", "carol"])
    jobs = [_complete(service, nodes, seed=n)[0] for n in (1, 2, 3)]
    with statements_run(service.db.engine) as seen:
        done = service.peers.dispatch()
    assert len(done.assigned) == 3
    assert all(r.status is PeerCheckStatus.ASSIGNED for j in jobs for r in service.peers.of_job(j))
    # Every checker is asked whether to plant; the sources are the same answered checks for each.
    assert sum("source_receipt_body" in s for s in seen) == 1
    assert not [s for s in seen if s.startswith("SELECT peer_checks.") and "WHERE peer_checks.job_id =" in s]


class HoldsOtherWeights:
    """A coordinator verifier without the jobs' weights: every check is the peers' to run."""

    def held_models(self) -> frozenset[tuple[str, str]]:
        return frozenset()

    def weights_digest(self, model_id: str) -> str | None:
        return None

    def check(self, *args: object) -> object:
        raise AssertionError("a check left to the peers is not replayed here")


def test_the_verifier_reads_no_tokens_of_a_peers_check_and_looks_for_abandoned_replays_every_interval(
        service: CoordinatorService, tmp_path: Path) -> None:
    service.checks.attach_checker(HoldsOtherWeights())  # type: ignore[arg-type]
    nodes = _fleet(service, tmp_path, ["alice", "bob"])
    job_id, _ = _complete(service, nodes, seed=1)

    def looks(seen: list[str]) -> int:  # store.started_checks: waiting checks whose replay began
        return sum("job_checks.verifier_attempts >" in s for s in seen)

    with statements_run(service.db.engine) as first:
        assert service.checks.run() == []
    assert looks(first) == 1 and not [s for s in first if "FROM job_tokens" in s]
    with statements_run(service.db.engine) as second:  # the next receipt's pass, at once
        assert service.checks.run() == []
    assert looks(second) == 0 and not [s for s in second if "FROM jobs" in s or "FROM job_tokens" in s]
    service.clock.ms += ABANDONED_LOOK_INTERVAL_MS  # type: ignore[attr-defined]
    with statements_run(service.db.engine) as later:
        assert service.checks.run() == []
    assert looks(later) == 1
    assert service.checks.of_job(job_id).status is CheckStatus.WAITING  # type: ignore[union-attr]
    _assigned(service, job_id, Role.CHECK)  # and a peer is sent it


def test_a_cheat_is_disputed_and_a_referee_of_a_third_operator_confirms_it(service: CoordinatorService,
                                                                          tmp_path: Path) -> None:
    nodes = _fleet(service, tmp_path, ["alice", "bob", "carol"])
    job_id, cheater = _complete(service, nodes, seed=1)  # its commitment: states of seed 1
    check_id, checker = _assigned(service, job_id, Role.CHECK)
    outcome = _answer(service, nodes, check_id, checker, job_id, seed=2)  # the true states differ
    assert outcome.accepted and outcome.decided is None  # a dispute: nothing decided yet
    held = service.checks.of_job(job_id)
    assert held is not None and held.status is CheckStatus.PEER and "disputed" in (held.reason or "")
    referee_check, referee = _assigned(service, job_id, Role.REFEREE)
    assert referee not in (checker, cheater)
    assert _operator(service, referee) not in (_operator(service, checker), _operator(service, cheater))
    outcome = _answer(service, nodes, referee_check, referee, job_id, seed=2)
    assert outcome.verdict is not None and not outcome.verdict.passed and outcome.penalized_node_id is None
    check = service.checks.of_job(job_id)
    assert check is not None and check.status is CheckStatus.FAILED and check.credit_state is CreditState.VOIDED
    trust, _ = service.checks.of_node(cheater)
    assert trust.record.checks_failed == 1
    fee = check_fee(check.operator_credit, TRUST.stake)
    assert _posted(service, _operator(service, checker)) == fee == _posted(service, _operator(service, referee))


def test_a_lying_checker_is_caught_by_the_referee_and_not_paid(service: CoordinatorService,
                                                               tmp_path: Path) -> None:
    nodes = _fleet(service, tmp_path, ["alice", "bob", "carol"])
    job_id, honest = _complete(service, nodes, seed=1)
    check_id, liar = _assigned(service, job_id, Role.CHECK)
    _answer(service, nodes, check_id, liar, job_id, seed=9)  # claims the job's states are others
    referee_check, referee = _assigned(service, job_id, Role.REFEREE)
    outcome = _answer(service, nodes, referee_check, referee, job_id, seed=1)
    assert outcome.verdict is not None and outcome.verdict.passed and outcome.penalized_node_id == liar
    check = service.checks.of_job(job_id)
    assert check is not None and check.status is CheckStatus.PASSED and check.credit_state is CreditState.POSTED
    assert service.checks.of_node(liar)[0].record.checks_failed == 1
    assert service.checks.of_node(honest)[0].record.checks_failed == 0
    assert _posted(service, _operator(service, liar)) == 0  # a contradicted answer earns nothing
    assert _posted(service, _operator(service, referee)) == check_fee(check.operator_credit, TRUST.stake)


def test_a_check_that_lapses_or_fails_goes_to_another_peer_then_stays_held(service: CoordinatorService,
                                                                         tmp_path: Path) -> None:
    nodes = _fleet(service, tmp_path, ["alice", "bob", "carol", "dave"])
    job_id, _ = _complete(service, nodes, seed=1)
    _, first = _assigned(service, job_id, Role.CHECK)
    service.clock.ms += PEERS.deadline_ms + 1  # type: ignore[attr-defined]
    for node_id in nodes:  # still online
        with service.db.transaction() as session:
            node = node_rows.node_by_id(session, node_id)
        service.nodes.heartbeat(node, 0)  # type: ignore[arg-type]
    second_check, second = _assigned(service, job_id, Role.CHECK)
    assert second != first
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, second)
    assert service.peers.accept_failure(node, second_check, "replay failed: out of memory")  # type: ignore[arg-type]
    service.peers.dispatch()
    check = service.checks.of_job(job_id)  # attempts_max (2) checkers asked: held, with the reason
    assert check is not None and check.status is CheckStatus.QUARANTINED
    assert check.credit_state is CreditState.PENDING and "the credit stays held" in (check.reason or "")
    assert [r.status for r in service.peers.of_job(job_id)] == [PeerCheckStatus.LAPSED] * 2


def test_a_result_not_signed_by_the_checker_or_for_another_job_is_refused(service: CoordinatorService,
                                                                         tmp_path: Path) -> None:
    nodes = _fleet(service, tmp_path, ["alice", "bob"])
    job_id, checked = _complete(service, nodes, seed=1)
    check_id, checker = _assigned(service, job_id, Role.CHECK)
    prompt, generated = _states(1)
    result = CheckResult(check_id, job_id, checker, MODEL.model_id, MODEL.weights_digest, prompt_digest(PROMPT),
                         output_digest((1, 2, 3)), 2, prompt, generated, ())
    body = encode_result(result)
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, checker)
    with pytest.raises(InvalidRequest, match="result.signature"):
        service.peers.accept_result(node, check_id, body, nodes[checked].sign(signing_bytes(body)))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="output_digest does not match"):
        service.peers.accept_result(node, check_id, body, nodes[checker].sign(signing_bytes(body)))  # type: ignore[arg-type]
    assert service.peers.of_job(job_id)[0].status is PeerCheckStatus.ASSIGNED  # still open
