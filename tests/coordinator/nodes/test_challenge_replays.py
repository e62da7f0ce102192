"""Challenge answers replayed with real MLX on the tiny reference model (issue 25).

An honest node decodes its challenge as a job and signs it; the coordinator's verifier replays
the tokens and commitment and the Mac is proven: an Ultra seat earns its bonus. A fake Ultra
answers in plausible time with a validly signed receipt but tokens it never decoded: its answer
fits every check at the door, fails the replay, and the fake earns no seat bonus.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.benchmarks import REFERENCE_MODEL_ID
from contracts.lending import LendingMode, LendingState
from contracts.receipts import encode_receipt
from coordinator.model import SignedReceipt, SpotChallenge
from coordinator.money.epochs import EpochSettings, gather_seats
from coordinator.service import CoordinatorService
from coordinator.verification.isolated import InProcessChecker
from node_agent.coordinator_client import Challenge, NodeStatus
from node_agent.identity import Identity, load_or_create_identity
from node_agent.inference.benchmark import run_challenge
from node_agent.inference.engine import Engine, LocalReplayer
from node_agent.model_files import describe_model
from tests.coordinator.nodes.test_claims import FAKE_ULTRA, _fits, _service
from tests.coordinator.nodes.test_spot_benchmarks import _node, _outcomes, _receipt, _sent_challenge
from tests.coordinator.verification.test_outcomes import MODEL
from tests.node_registration import register_node

SEAT = LendingState(mode=LendingMode.ULTRA_SEAT)


@pytest.fixture
def service(database_url: str, tiny_model_dir: Path) -> Iterator[CoordinatorService]:
    for service in _service(database_url, challenge_mean_interval_s=1e-3, challenge_pass_interval_s=10.0):
        spec = describe_model(REFERENCE_MODEL_ID, tiny_model_dir)
        service.checks.attach_checker(InProcessChecker(LocalReplayer(
            Engine(), {REFERENCE_MODEL_ID: (str(tiny_model_dir), spec.weights_digest)})))
        yield service


def _ultra_seat(service: CoordinatorService, identity: Identity) -> SpotChallenge:
    """An Ultra seat whose self-benchmark fits its chip, and the challenge it was sent."""
    benchmark = dataclasses.replace(_fits(0.8 * 819), reference_model=REFERENCE_MODEL_ID)
    register_node(service, identity, FAKE_ULTRA, (MODEL,), "operator",
                  status=NodeStatus(lending=SEAT, benchmark=benchmark))
    return _sent_challenge(service, identity.node_id)


def _seat_verified(service: CoordinatorService, node_id: str) -> bool:
    with service.db.transaction() as session:
        seats = gather_seats(session, 0, EpochSettings(length_s=10**9))
    return next(seat.verified_ultra for seat in seats if seat.node_id == node_id)


def _replay(service: CoordinatorService) -> list[str]:
    assert service.checks.verifier is not None
    return service.spot_checks.replay_answers(service.checks.verifier.checker)


def test_an_honest_answer_passes_its_replay_and_earns_the_seat_bonus(
        service: CoordinatorService, tmp_path: Path, tiny_model_dir: Path) -> None:
    identity = load_or_create_identity(tmp_path / "honest.pem")
    challenge = _ultra_seat(service, identity)
    assert not _seat_verified(service, identity.node_id)  # a fitting benchmark alone earns nothing
    run = run_challenge(Engine(), describe_model(REFERENCE_MODEL_ID, tiny_model_dir), tiny_model_dir,
                        identity.node_id, Challenge(challenge.challenge_id, challenge.prompt, challenge.seed,
                                                    challenge.decode_tokens))
    service.clock.ms += 1_500  # type: ignore[attr-defined]  (in time at the claimed 300 tok/s)
    body = encode_receipt(run.receipt)
    record = _node(service, identity.node_id)
    assert service.spot_checks.answer(record, challenge.challenge_id, run.token_ids,
                                      SignedReceipt(body, identity.sign(body))) is None
    assert _replay(service) == [identity.node_id]
    assert _outcomes(service, identity.node_id) == ["passed"]
    assert _node(service, identity.node_id).hardware_proven
    assert _seat_verified(service, identity.node_id)


@pytest.mark.parametrize("tokens", ["random", "past the vocabulary"])
def test_a_fake_that_answers_in_time_with_tokens_it_did_not_decode_fails_and_earns_no_bonus(
        service: CoordinatorService, tmp_path: Path, tokens: str) -> None:
    identity = load_or_create_identity(tmp_path / "fake.pem")
    challenge = _ultra_seat(service, identity)
    draws = random.Random(challenge.seed)
    token_ids = (tuple(draws.randrange(1000) for _ in range(challenge.decode_tokens)) if tokens == "random"
                 else (2**31 - 1,) * challenge.decode_tokens)
    service.clock.ms += 1_500  # type: ignore[attr-defined]  (plausible timing: about the claimed rate)
    record = _node(service, identity.node_id)
    digest = dict(service.checks.held_models())[REFERENCE_MODEL_ID]  # the very reference weights
    # Every check at the door passes: in time, the right count, signed, the challenge's terms.
    assert service.spot_checks.answer(record, challenge.challenge_id, token_ids,
                                      _receipt(identity, challenge, token_ids, digest=digest)) is None
    assert _replay(service) == [identity.node_id]
    flag = _node(service, identity.node_id).challenge_flag
    expected = ("challenge benchmark failed its replay" if tokens == "random"
                else "challenge benchmark answer could not be replayed")
    assert flag is not None and flag.startswith(expected), flag
    assert _outcomes(service, identity.node_id) == [flag]
    assert not _node(service, identity.node_id).hardware_verified  # placed as the slowest Mac
    assert not _seat_verified(service, identity.node_id)


def test_the_reference_model_is_still_built_byte_for_byte_as_pinned(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Coordinators know the reference weights by this digest without building them; a builder
    that made other bytes would fail every honest node's challenge."""
    from contracts.benchmarks import REFERENCE_WEIGHTS_DIGEST
    from mlxnet.verifier import ensure_reference_model

    assert describe_model(REFERENCE_MODEL_ID, tiny_model_dir).weights_digest == REFERENCE_WEIGHTS_DIGEST
    ensure_reference_model(tmp_path / "reference-model")  # builds it, and checks the bytes
    assert not (tmp_path / "reference-model.partial").exists()
