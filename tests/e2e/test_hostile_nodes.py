"""Issue 25's hostile nodes against a real coordinator process (with its verifier worker):
an out-of-vocabulary token id is refused and crashes nothing, at first or on restart.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mlxnet.checks_view import wait_for_checks
from mlxnet.consumer import JobClient
from mlxnet.processes import operator_key, start_coordinator
from node_agent.coordinator_client import CallRejected, CoordinatorClient
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import load_or_create_identity
from node_agent.model_files import describe_model

pytestmark = pytest.mark.e2e
MODEL_ID = "test/tiny-llama"


def _coordinator(work_dir: Path, database_url: str, model_dir: Path, port: int = 0):  # type: ignore[no-untyped-def]
    return start_coordinator(work_dir, database_url=database_url, port=port, heartbeat_interval_ms=500,
                             allow_anonymous=True, verify_models=(f"{MODEL_ID}={model_dir}",))


def test_an_out_of_vocabulary_token_id_is_refused_and_crashes_nothing(tmp_path: Path,
                                                                     tiny_model_dir: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    coordinator = _coordinator(tmp_path, database_url, tiny_model_dir)
    try:
        address = coordinator.extra["address"]
        spec = describe_model(MODEL_ID, tiny_model_dir)
        assert spec.vocab_size > 0
        mallory = CoordinatorClient(address, coordinator.trust)
        identity = load_or_create_identity(tmp_path / "mallory.pem")
        mallory.register(identity, simulated_profile("m4-max-128"), (spec,), "mallory", "mallory", 1,
                         operator_key=operator_key(address, "mallory") or "")
        with JobClient(address, trust=coordinator.trust) as consumer:
            job = consumer.submit(MODEL_ID, "In the beginning", max_tokens=8)
            assignment = next(mallory.assignments())
            assert assignment.job_id == job.job_id
            with pytest.raises(CallRejected) as refused:
                mallory.stream_tokens(job.job_id, iter([(0, (5, 2**31 - 1), "x")]))
            assert refused.value.code == "INVALID_ARGUMENT"
            assert f"token id {2**31 - 1} is outside the vocabulary of {MODEL_ID}" in str(refused.value)
            assert consumer.get(job.job_id).completion_tokens == 0  # stored nothing
        mallory.close()
        port = int(address.rsplit(":", 1)[1])
        assert coordinator.process.poll() is None  # still serving
        coordinator.stop()
        coordinator = _coordinator(tmp_path, database_url, tiny_model_dir, port)  # and after a restart
        with JobClient(coordinator.extra["address"], trust=coordinator.trust) as consumer:
            assert consumer.get(job.job_id).job_id == job.job_id
        assert coordinator.process.poll() is None
    finally:
        coordinator.stop()


class _Sample:
    """Every job is sampled for a check."""

    def random(self) -> float:
        return 0.0


class _HoldsTiny:
    """Stands for the verifier while the poisoned job is written: it is never asked to replay."""

    def __init__(self, digest: str) -> None:
        self.digest = digest

    def held_models(self) -> frozenset[tuple[str, str]]:
        return frozenset({(MODEL_ID, self.digest)})


def _store_a_job_with_an_out_of_vocabulary_token(database_url: str, tiny_model_dir: Path,
                                                 tmp_path: Path) -> str:
    """What an older coordinator stored before ids were checked at the door: a completed job
    whose streamed tokens hold 2**31 - 1, its check waiting for a replay."""
    import time

    from contracts.ids import JobId
    from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
    from coordinator.clock import SystemClock
    from coordinator.config import CoordinatorConfig
    from coordinator.jobs.submission import Submission
    from coordinator.model import TokenChunk
    from coordinator.service import CoordinatorService
    from coordinator.storage import job_rows, node_rows
    from coordinator.storage.database import Database, upgrade_schema
    from tests.node_registration import register_node
    from tests.proof_helpers import well_formed_commitment

    upgrade_schema(database_url)
    db = Database(database_url)
    service = CoordinatorService(db, SystemClock(), CoordinatorConfig(database_url=database_url),
                                 draws=_Sample())  # type: ignore[arg-type]
    spec = describe_model(MODEL_ID, tiny_model_dir)
    service.checks.attach_verifier(_HoldsTiny(spec.weights_digest))  # type: ignore[arg-type]
    identity = load_or_create_identity(tmp_path / "old-mallory.pem")
    register_node(service, identity, simulated_profile("m4-max-128"), (spec,), "mallory")
    job = service.jobs.submit(Submission(consumer_id="anonymous", model_id=MODEL_ID, prompt="Hello",
                                         max_tokens=8, temperature=0.0, top_p=1.0, seed=0,
                                         request_id="", min_decode_tokens_per_s=0.0)).job
    tokens = (5, 2**31 - 1, 7)
    with db.transaction() as session:  # past the door, as before it checked ids
        job_rows.insert_chunk(session, job.job_id, TokenChunk(0, tokens, "abc"))
        node = node_rows.node_by_id(session, identity.node_id)
    assert node is not None
    now = int(time.time() * 1000)
    receipt = Receipt(JobId(job.job_id), identity.node_id, MODEL_ID, spec.weights_digest,
                      prompt_digest("Hello"), 0.0, 1.0, 0, 8, output_digest(tokens), 2, 3, now, now,
                      well_formed_commitment(3), FinishReason.END_TOKEN, now)
    body = encode_receipt(receipt)
    service.nodes.accept_receipt(node, job.job_id, body, identity.sign(body))
    assert service.checks.of_job(job.job_id).status.value == "waiting"  # type: ignore[union-attr]
    db.dispose()
    return job.job_id


def _check_of(database_url: str, job_id: str):  # type: ignore[no-untyped-def]
    from coordinator.storage.database import Database
    from coordinator.verification import store

    db = Database(database_url)
    try:
        with db.transaction() as session:
            return store.check_by_job(session, job_id)
    finally:
        db.dispose()


def test_stored_work_that_cannot_be_replayed_is_quarantined_once_and_never_again(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    from coordinator.verification.store import CheckStatus, CreditState

    database_url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    job_id = _store_a_job_with_an_out_of_vocabulary_token(database_url, tiny_model_dir, tmp_path)
    coordinator = _coordinator(tmp_path, database_url, tiny_model_dir)
    try:
        # The verifier worker got to it: waiting for peers too would never end, as here there are none.
        (check,) = wait_for_checks(database_url, [job_id], waiting=frozenset({CheckStatus.WAITING}))
        # Escalated to a peer (peer checks are on by default), never replayed here again, credit held.
        assert check.status is CheckStatus.PEER and check.credit_state is CreditState.PENDING
        assert "vocabulary size" in (check.reason or "")
        assert coordinator.process.poll() is None
        port = int(coordinator.extra["address"].rsplit(":", 1)[1])
        coordinator.stop()
        coordinator = _coordinator(tmp_path, database_url, tiny_model_dir, port)
        with JobClient(coordinator.extra["address"], trust=coordinator.trust) as consumer:
            assert consumer.get(job_id).job_id == job_id  # serving, after the restart too
        again = _check_of(database_url, job_id)
        # Not replayed again: nothing about the check changed but the peers' search for a checker.
        assert again is not None and again == dataclasses.replace(check, reason=again.reason)
        assert "no peer can check" in (again.reason or "") or again.reason == check.reason
        assert coordinator.process.poll() is None
    finally:
        coordinator.stop()
