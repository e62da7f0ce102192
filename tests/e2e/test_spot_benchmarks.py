"""Challenge benchmarks against real processes (issue 25): a coordinator that challenges verified
Macs often and replays their answers on its own copy of the reference model; a real node agent
(this Linux host, its own self-benchmark) that decodes its challenge on the tiny reference model
and passes the replay; a fake that answers at once without decoding; and a fake "M3 Ultra" seat
that answers in plausible time with a validly signed receipt over tokens it never decoded. Both
fakes go back to "claimed", and the fake Ultra earns no seat bonus."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import dataclasses
import random

from contracts.benchmarks import CHALLENGE_TEMPERATURE, CHALLENGE_TOP_P, REFERENCE_MODEL_ID, BenchmarkResult
from contracts.hardware import ChipTier, HardwareReport
from contracts.ids import JobId, NodeId
from contracts.lending import LendingMode, LendingState
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from coordinator.money.epochs import EpochSettings, gather_seats
from coordinator.storage import challenge_rows, node_rows
from coordinator.storage.database import Database
from node_agent.identity import Identity
from tests.coordinator.nodes.test_claims import FAKE_ULTRA
from tests.proof_helpers import well_formed_commitment
from mlxnet.processes import spawn_node, start_coordinator, wait_until_registered
from node_agent.coordinator_client import Challenge, CoordinatorClient, NodeStatus
from node_agent.identity import load_or_create_identity
from node_agent.model_files import describe_model

pytestmark = pytest.mark.e2e
MODEL_ID = "test/tiny-llama"
WAIT_S = 420  # the node's self-benchmark and its challenge on a shared machine; bounds a stuck test
LINUX_BOX = HardwareReport(chip="Linux box", chip_family="", chip_tier=ChipTier.NOT_APPLE,
                           memory_bytes=16 << 30, gpu_working_set_bytes=12 << 30, gpu_cores=0,
                           memory_bandwidth_gb_s=20.0, os_name="Linux")
CLAIMED = BenchmarkResult(memory_bandwidth_gb_s=20.0, decode_tokens_per_s=400.0, prefill_tokens_per_s=4000.0,
                          reference_model=REFERENCE_MODEL_ID, reference_weights_bytes=12_000_000,
                          measured_at_ms=1, run_time_ms=1_000)
# Fits an M3 Ultra's chip; 300 tok/s on the tiny model, so a challenge is 300 tokens in about 1 s.
ULTRA_CLAIMED = dataclasses.replace(CLAIMED, memory_bandwidth_gb_s=0.8 * 819, decode_tokens_per_s=300.0)
ULTRA_SEAT = NodeStatus(lending=LendingState(mode=LendingMode.ULTRA_SEAT), benchmark=ULTRA_CLAIMED)


def _outcomes(db: Database, node_id: str) -> list[str | None]:
    with db.transaction() as session:
        return [outcome for _, outcome in challenge_rows.outcomes(session, node_id)]


def _wait_for_outcome(db: Database, node_id: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        done = [outcome for outcome in _outcomes(db, node_id) if outcome not in (None, "not delivered")]
        if done:
            return done[0]
        time.sleep(0.2)
    raise AssertionError(f"no challenge of {node_id} was decided in {WAIT_S} s: {_outcomes(db, node_id)}")


def _garbage_answer(identity: Identity, challenge: Challenge, weights_digest: str) -> tuple[tuple[int, ...], tuple[bytes, bytes]]:
    """Random tokens in the vocabulary, and a receipt that fits the challenge in every field the
    door checks, signed by the fake's own key: only a replay tells it from a decode."""
    tokens = tuple(random.Random(challenge.seed).randrange(1000) for _ in range(challenge.decode_tokens))
    receipt = Receipt(
        job_id=JobId(challenge.challenge_id), node_id=NodeId(identity.node_id), model_id=REFERENCE_MODEL_ID,
        weights_digest=weights_digest, prompt_digest=prompt_digest(challenge.prompt),
        temperature=CHALLENGE_TEMPERATURE, top_p=CHALLENGE_TOP_P, seed=challenge.seed,
        max_tokens=challenge.decode_tokens, output_digest=output_digest(tokens), prompt_tokens=30,
        completion_tokens=len(tokens), started_at_ms=int(time.time() * 1000) - 1_000,
        first_token_at_ms=int(time.time() * 1000) - 990, finished_at_ms=int(time.time() * 1000),
        finish_reason=FinishReason.LENGTH, activation_commitment=well_formed_commitment(len(tokens)))
    body = encode_receipt(receipt)
    return tokens, (body, identity.sign(body))


def _fake_ultra_seat(client: CoordinatorClient, identity: Identity, tiny_model_dir: Path,
                     answers: list[str | None]) -> threading.Thread:
    """A Linux script that claims an M3 Ultra seat and answers its challenge after sleeping as
    long as the claimed speed needs, with garbage."""
    client.register(identity, FAKE_ULTRA, (describe_model(MODEL_ID, tiny_model_dir),), "", "fake-ultra", 1,
                    ULTRA_SEAT)
    digest = describe_model(REFERENCE_MODEL_ID, tiny_model_dir).weights_digest  # public: every node builds it

    def answer_in_plausible_time() -> None:
        for item in client.assignments():
            if isinstance(item, Challenge):
                time.sleep(item.decode_tokens / ULTRA_CLAIMED.decode_tokens_per_s)
                tokens, receipt = _garbage_answer(identity, item, digest)
                answers.append(client.answer_challenge(item.challenge_id, tokens, 300.0, receipt))
                return

    thread = threading.Thread(target=answer_in_plausible_time, daemon=True)
    thread.start()
    return thread


def _seat_verified(db: Database, node_id: str) -> bool:
    with db.transaction() as session:
        seats = gather_seats(session, 0, EpochSettings(length_s=10**9))
    return next(seat.verified_ultra for seat in seats if seat.node_id == node_id)


@pytest.mark.timeout(900)  # the node's self-benchmark, then its challenge, on a loaded 2-core machine
def test_a_real_node_passes_its_replayed_challenge_and_fakes_that_do_not_decode_fail(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    coordinator = start_coordinator(tmp_path, database_url=database_url, heartbeat_interval_ms=500,
                                    extra_args=("--challenge-mean-interval-s", "0.5"))
    db = Database(database_url)
    fake = CoordinatorClient(coordinator.extra["address"], coordinator.trust)
    ultra = CoordinatorClient(coordinator.extra["address"], coordinator.trust)
    node = None
    try:
        node = wait_until_registered(spawn_node(
            tmp_path, "honest", coordinator.extra["address"], [f"{MODEL_ID}={tiny_model_dir}"],
            trust=coordinator.trust, extra_args=("--benchmark", "on")))
        identity = load_or_create_identity(tmp_path / "fake.pem")
        fake.register(identity, LINUX_BOX, (describe_model(MODEL_ID, tiny_model_dir),), "", "fake", 1,
                      NodeStatus(benchmark=CLAIMED))
        answers: list[str | None] = []

        def answer_without_decoding() -> None:
            for item in fake.assignments():
                if isinstance(item, Challenge):
                    answers.append(fake.answer_challenge(item.challenge_id, (0,) * item.decode_tokens, 1e6))
                    return

        listener = threading.Thread(target=answer_without_decoding, daemon=True)
        listener.start()
        ultra_identity = load_or_create_identity(tmp_path / "fake-ultra.pem")
        ultra_answers: list[str | None] = []
        ultra_listener = _fake_ultra_seat(ultra, ultra_identity, tiny_model_dir, ultra_answers)

        assert _wait_for_outcome(db, identity.node_id).startswith("challenge benchmark answered")
        listener.join(30)
        assert answers and answers[0] is not None and "it was not decoded" in answers[0]

        # The fake Ultra's answer fits at the door (in time, signed, the challenge's terms)...
        replayed = _wait_for_outcome(db, ultra_identity.node_id)
        ultra_listener.join(30)
        assert ultra_answers == [None]
        # ...and fails the coordinator's replay: claimed again, and no seat bonus.
        assert replayed.startswith("challenge benchmark failed its replay"), replayed
        assert "not what the model samples" in replayed

        assert _wait_for_outcome(db, node.extra["node_id"]) == "passed"
        with db.transaction() as session:
            honest = node_rows.node_by_id(session, node.extra["node_id"])
            faked = node_rows.node_by_id(session, identity.node_id)
            faked_ultra = node_rows.node_by_id(session, ultra_identity.node_id)
        assert honest is not None and honest.hardware_verified and honest.hardware_proven
        assert faked is not None and not faked.hardware_verified and faked.challenge_flag
        assert faked_ultra is not None and not faked_ultra.hardware_verified
        assert faked_ultra.challenge_flag == replayed and not _seat_verified(db, ultra_identity.node_id)
    finally:
        fake.close()
        ultra.close()
        if node is not None:
            node.stop()
        coordinator.stop()
        db.dispose()
