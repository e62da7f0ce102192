"""Challenge benchmarks (issue 25): a verified Mac is re-checked at random times with the
coordinator's own prompt and seed; an answer that does not fit its claimed speed puts its
hardware back to "claimed" (placed as the slowest Mac, no Ultra-seat bonus) until one passes.
An answer that fits passes only once its replay agrees (a scripted checker here; real MLX
replays in test_challenge_replays.py)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.benchmarks import CHALLENGE_TEMPERATURE, CHALLENGE_TOP_P
from contracts.ids import JobId, NodeId
from contracts.limits import CHALLENGE_TOKENS_MAX
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from coordinator.errors import NotFound
from coordinator.model import SignedReceipt, SpotChallenge
from coordinator.nodes import spot_benchmarks
from coordinator.service import CoordinatorService
from coordinator.storage import challenge_rows, node_rows
from coordinator.service.spot_checks import REPLAY_RETRY_MS
from coordinator.verification.isolated import ReplayFailed
from coordinator.verification.judge import CheckVerdict, ChunkCheck
from node_agent.coordinator_client import NodeStatus
from node_agent.identity import Identity, load_or_create_identity
from tests.proof_helpers import well_formed_commitment
from tests.coordinator.nodes.test_claims import FAKE_ULTRA, _fits, _predicted, _service
from tests.coordinator.verification.test_outcomes import MODEL
from tests.node_registration import register_node

CLAIMED_TOKENS_PER_S = 300.0  # _fits's decode rate
DIGEST = "reference-digest"


class ScriptedChecker:
    """Holds the reference model "tiny" and gives the verdict it is told, counting replays."""

    def __init__(self, passed: bool) -> None:
        self.passed, self.replays = passed, 0

    def held_models(self) -> frozenset[tuple[str, str]]:
        return frozenset({("tiny", DIGEST)})

    def weights_digest(self, model_id: str) -> str | None:
        return DIGEST if model_id == "tiny" else None

    def check(self, *args: object) -> CheckVerdict:
        self.replays += 1
        return CheckVerdict(self.passed, () if self.passed else ("token 3 is not what the model samples",))


def _receipt(identity: Identity, challenge: SpotChallenge, token_ids: tuple[int, ...],
             digest: str = DIGEST, seed: int | None = None) -> SignedReceipt:
    """The receipt a node signs over its answer; its commitment has the right shape only."""
    receipt = Receipt(
        job_id=JobId(challenge.challenge_id), node_id=NodeId(identity.node_id), model_id=challenge.model_id,
        weights_digest=digest, prompt_digest=prompt_digest(challenge.prompt),
        temperature=CHALLENGE_TEMPERATURE, top_p=CHALLENGE_TOP_P,
        seed=challenge.seed if seed is None else seed, max_tokens=challenge.decode_tokens,
        output_digest=output_digest(token_ids), prompt_tokens=24, completion_tokens=len(token_ids),
        started_at_ms=1, finished_at_ms=2, first_token_at_ms=1, finish_reason=FinishReason.LENGTH,
        activation_commitment=well_formed_commitment(len(token_ids)))
    body = encode_receipt(receipt)
    return SignedReceipt(body, identity.sign(body))


def _challenge(decode_tokens: int = 600, sent_at_ms: int | None = 1_000) -> SpotChallenge:
    return SpotChallenge("challenge-x", "node-x", "tiny", "a b c", 7, decode_tokens, 0,
                         CLAIMED_TOKENS_PER_S, sent_at_ms)


def test_an_answer_in_time_passes_and_a_slow_short_or_impossibly_fast_one_fails() -> None:
    challenge = _challenge()
    allowed = spot_benchmarks.allowed_ms(challenge)
    assert allowed == spot_benchmarks.OVERHEAD_MS + 8_000  # 600 tokens at a quarter of 300 tok/s
    assert spot_benchmarks.answer_problem(challenge, 600, 1_000 + allowed) is None
    slow = spot_benchmarks.answer_problem(challenge, 600, 1_000 + allowed + 1)
    assert slow is not None and "the node's benchmark claims 300.0 tok/s" in slow
    short = spot_benchmarks.answer_problem(challenge, 599, 1_500)
    assert short == "challenge benchmark answered 599 tokens; 600 were asked for"
    instant = spot_benchmarks.answer_problem(challenge, 600, 1_010)  # 60,000 tok/s
    assert instant is not None and "faster than" in instant


@given(st.floats())
def test_a_challenge_is_never_longer_than_the_edge_allows(claimed: float) -> None:
    tokens = spot_benchmarks.decode_tokens_for(claimed)
    # Within the edge's bound, and within the reference model's context beside the prompt.
    assert spot_benchmarks.DECODE_TOKENS_MIN <= tokens <= spot_benchmarks.DECODE_TOKENS_MAX <= CHALLENGE_TOKENS_MAX


@given(st.integers(1, 100_000), st.integers(1, 100_000))
def test_of_two_full_answers_the_quicker_never_fails_for_slowness(first_ms: int, second_ms: int) -> None:
    challenge = _challenge()
    quick, slow = sorted((first_ms, second_ms))
    quick_problem = spot_benchmarks.answer_problem(challenge, 600, 1_000 + quick)
    slow_problem = spot_benchmarks.answer_problem(challenge, 600, 1_000 + slow)
    if slow_problem is None:
        assert quick_problem is None or "faster than" in quick_problem


def test_challenges_come_at_random_times_about_as_often_as_asked() -> None:
    draws = random.Random(5)
    due = sum(spot_benchmarks.is_due(draws, 10.0, 600.0) for _ in range(60_000))
    assert 900 < due < 1_100  # 60,000 passes of 10 s: 1,000 expected


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    # Every pass challenges every candidate: the mean interval is far below the pass's.
    yield from _service(database_url, challenge_mean_interval_s=1e-3, challenge_pass_interval_s=10.0)


def _sent_challenge(service: CoordinatorService, node_id: str) -> SpotChallenge:
    assert service.spot_checks.issue_due() == [node_id]
    assert service.spot_checks.issue_due() == []  # one open at a time
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    steps = service.nodes.assignment_steps(node)
    try:
        item = next(step for step in steps if isinstance(step, SpotChallenge))
    finally:
        steps.close()
    assert item.sent_at_ms == service.clock.now_ms() or item.sent_at_ms is None
    return item


def _verified(service: CoordinatorService, node_id: str) -> bool:
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    return node.hardware_verified


def _node(service: CoordinatorService, node_id: str):  # type: ignore[no-untyped-def]
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    return node


def _outcomes(service: CoordinatorService, node_id: str) -> list[str | None]:
    with service.db.transaction() as session:
        return [outcome for _, outcome in challenge_rows.outcomes(session, node_id)]


def test_a_fake_ultra_that_fails_its_challenge_is_only_claimed_until_one_passes_its_replay(
        service: CoordinatorService, tmp_path: Path) -> None:
    identity = load_or_create_identity(tmp_path / "fake.pem")
    register_node(service, identity, FAKE_ULTRA, (MODEL,), "mallory",
                  status=NodeStatus(benchmark=_fits(0.8 * 819)))  # its benchmark is believed
    assert _verified(service, identity.node_id) and not _node(service, identity.node_id).hardware_proven
    fast_job = _predicted(service).predicted_decode_tokens_per_s  # type: ignore[union-attr]

    challenge = _sent_challenge(service, identity.node_id)
    assert challenge.claimed_tokens_per_s == CLAIMED_TOKENS_PER_S
    record = _node(service, identity.node_id)
    tokens = (5,) * challenge.decode_tokens
    service.clock.ms += spot_benchmarks.allowed_ms(challenge) + 1  # type: ignore[attr-defined]
    problem = service.spot_checks.answer(record, challenge.challenge_id, tokens, _receipt(identity, challenge, tokens))
    assert problem is not None and "challenge benchmark decoded" in problem
    assert not _verified(service, identity.node_id)
    assert _predicted(service, fast_job) is None  # placed as the slowest Mac again
    with pytest.raises(NotFound):  # answered once only
        service.spot_checks.answer(record, challenge.challenge_id, tokens, _receipt(identity, challenge, tokens))

    # A fresh self-benchmark does not clear it; a re-registration neither.
    register_node(service, identity, FAKE_ULTRA, (MODEL,), "mallory",
                  status=NodeStatus(benchmark=dataclasses.replace(_fits(0.8 * 819), measured_at_ms=2)))
    assert not _verified(service, identity.node_id)

    # An answer in time is not a pass: it waits for its replay, which fails here.
    again = _sent_challenge(service, identity.node_id)
    service.clock.ms += 2_000  # type: ignore[attr-defined]
    tokens = (7,) * again.decode_tokens
    assert service.spot_checks.answer(record, again.challenge_id, tokens, _receipt(identity, again, tokens)) is None
    assert _outcomes(service, identity.node_id)[-1] is None and not _verified(service, identity.node_id)
    assert service.spot_checks.issue_due() == []  # still open until replayed
    lying = ScriptedChecker(passed=False)
    assert service.spot_checks.replay_answers(lying) == [identity.node_id]
    assert service.spot_checks.replay_answers(lying) == [] and lying.replays == 1  # judged once
    failed = _node(service, identity.node_id)
    assert failed.challenge_flag is not None and failed.challenge_flag.startswith(
        "challenge benchmark failed its replay") and "token 3" in failed.challenge_flag
    assert not failed.hardware_verified and not failed.hardware_proven

    third = _sent_challenge(service, identity.node_id)
    service.clock.ms += 2_000  # type: ignore[attr-defined]
    tokens = (9,) * third.decode_tokens
    assert service.spot_checks.answer(record, third.challenge_id, tokens, _receipt(identity, third, tokens)) is None
    assert service.spot_checks.replay_answers(ScriptedChecker(passed=True)) == [identity.node_id]
    proven = _node(service, identity.node_id)
    assert proven.hardware_verified and proven.hardware_proven and proven.challenge_flag is None
    outcomes = _outcomes(service, identity.node_id)
    assert outcomes[-1] == "passed" and outcomes[0] is not None and outcomes[0].startswith("challenge benchmark")


def test_an_answer_without_a_fitting_signed_receipt_fails_at_once(
        service: CoordinatorService, tmp_path: Path) -> None:
    identity = load_or_create_identity(tmp_path / "fake.pem")
    stranger = load_or_create_identity(tmp_path / "stranger.pem")
    register_node(service, identity, FAKE_ULTRA, (MODEL,), "mallory",
                  status=NodeStatus(benchmark=_fits(0.8 * 819)))
    record = _node(service, identity.node_id)
    cases = (
        (lambda c, t: None, "without a signed receipt"),
        (lambda c, t: _receipt(stranger, c, t), "not signed by the node's key"),
        (lambda c, t: _receipt(identity, c, t, seed=c.seed + 1), "seed does not match"),
        (lambda c, t: _receipt(identity, c, (1,) * len(t)), "output digest differs"),
    )
    for make, reason in cases:
        challenge = _sent_challenge(service, identity.node_id)
        service.clock.ms += 2_000  # type: ignore[attr-defined]
        tokens = (2,) * challenge.decode_tokens
        problem = service.spot_checks.answer(record, challenge.challenge_id, tokens, make(challenge, tokens))
        assert problem is not None and reason in problem, problem
        assert not _verified(service, identity.node_id)


def test_an_unanswered_challenge_fails_at_its_deadline(service: CoordinatorService, tmp_path: Path) -> None:
    identity = load_or_create_identity(tmp_path / "silent.pem")
    register_node(service, identity, FAKE_ULTRA, (MODEL,), "mallory",
                  status=NodeStatus(benchmark=_fits(0.8 * 819)))
    _sent_challenge(service, identity.node_id)
    service.clock.ms += spot_benchmarks.ANSWER_DEADLINE_MS  # type: ignore[attr-defined]
    service.spot_checks.issue_due()
    assert _verified(service, identity.node_id)  # not yet past it
    service.clock.ms += 1  # type: ignore[attr-defined]
    service.spot_checks.issue_due()  # (it is offline by now: no new challenge)
    assert not _verified(service, identity.node_id)


def test_an_unverified_mac_is_never_challenged(service: CoordinatorService, tmp_path: Path) -> None:
    identity = load_or_create_identity(tmp_path / "claim.pem")
    register_node(service, identity, FAKE_ULTRA, (MODEL,), "mallory")  # no benchmark at all
    assert service.spot_checks.issue_due() == []


def test_a_failed_replay_names_the_tokens_before_the_long_list_of_chunks() -> None:
    chunks = tuple(ChunkCheck(f"tokens {32 * n}-{32 * n + 31}", 128, 128, 9.0, False) for n in range(40))
    verdict = CheckVerdict(False, (
        "the prompt is 86 tokens; the receipt claims 30",
        *(f"{c.label}: 128 of 128 committed activations differ from the replay (at most 8 may)" for c in chunks),
        "297 of 300 output tokens are not what the model samples with seed 7 (first: token 0)"), chunks)
    problem = spot_benchmarks.replay_problem(verdict)
    assert problem is not None and len(problem) < 1_200
    assert "the prompt is 86 tokens" in problem and "not what the model samples" in problem
    assert "40 of 40 chunks' committed activations differ from the replay (first, tokens 0-31: " in problem
    assert spot_benchmarks.replay_problem(CheckVerdict(True, ())) is None


class CrashingChecker(ScriptedChecker):
    """Its replay child dies: no verdict, through no proven fault of the answer."""

    def check(self, *args: object) -> CheckVerdict:
        self.replays += 1
        raise ReplayFailed("the replay child died during its replay (exit code -11)", crashed=True)


def test_a_replay_that_crashed_is_tried_again_then_fails_after_its_window(
        service: CoordinatorService, tmp_path: Path) -> None:
    identity = load_or_create_identity(tmp_path / "node.pem")
    register_node(service, identity, FAKE_ULTRA, (MODEL,), "op", status=NodeStatus(benchmark=_fits(0.8 * 819)))
    challenge = _sent_challenge(service, identity.node_id)
    service.clock.ms += 2_000  # type: ignore[attr-defined]
    tokens = (4,) * challenge.decode_tokens
    assert service.spot_checks.answer(_node(service, identity.node_id), challenge.challenge_id, tokens,
                                      _receipt(identity, challenge, tokens)) is None
    crashing = CrashingChecker(passed=False)
    assert service.spot_checks.replay_answers(crashing) == []  # no verdict yet: tried again later
    assert _outcomes(service, identity.node_id) == [None] and crashing.replays == 1
    service.clock.ms += REPLAY_RETRY_MS  # type: ignore[attr-defined]
    assert service.spot_checks.replay_answers(crashing) == [identity.node_id]
    flag = _node(service, identity.node_id).challenge_flag
    assert flag is not None and flag.startswith("challenge benchmark answer could not be replayed: the replay child died")
