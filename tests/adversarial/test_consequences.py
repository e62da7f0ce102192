"""Consequences on a real coordinator: a cheater is not paid, its jobs re-run elsewhere, repeat
offenders are quarantined; the honest node's held credit is posted once its check passes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.hardware import ChipTier, HardwareReport
from contracts.ids import OperatorId
from contracts.receipts import encode_receipt
from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from coordinator.money import job_money
from coordinator.server import RunningCoordinator, start
from coordinator.storage import job_rows
from coordinator.verification.store import CheckStatus, CreditState
from ledger.book import balance
from ledger.jobs import operator_account_id
from mlxnet.consumer import JobClient
from node_agent.coordinator_client import CoordinatorClient
from node_agent.identity import Identity
from node_agent.inference.engine import Engine, LocalReplayer
from node_agent.tiny_model import build_tiny_model
from node_agent.model_files import describe_model
from tests.adversarial.harness import MODEL_ID, Job, generate, new_identity, receipt_for

PLAINTEXT = CoordinatorTrust(insecure=True)  # the coordinator here serves plaintext on loopback

HARDWARE = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO,
                          memory_bytes=64 << 30, gpu_working_set_bytes=48 << 30, gpu_cores=20,
                          memory_bandwidth_gb_s=273.0, os_name="macOS (simulated)", simulated=True)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


@pytest.fixture(scope="module")
def other_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("cheat") / "other-seed", seed=1)


@pytest.fixture
def coordinator(database_url: str, tiny_model_dir: Path, engine: Engine) -> Iterator[RunningCoordinator]:
    running = start(CoordinatorConfig(database_url=database_url, stream_poll_interval_s=0.2,
                                      allow_anonymous=True))
    spec = describe_model(MODEL_ID, tiny_model_dir)
    # Attached after start, so no worker thread races the test: it replays when told to.
    running.service.checks.attach_verifier(LocalReplayer(engine, {MODEL_ID: (str(tiny_model_dir),
                                                                       spec.weights_digest)}))
    try:
        yield running
    finally:
        running.stop(grace_s=0)


class Node:
    """A node agent reduced to its protocol: it runs whatever model it likes and signs for it."""

    def __init__(self, address: str, operator: str, honest_dir: Path, runs_dir: Path,
                 engine: Engine) -> None:
        self.identity: Identity = new_identity()
        self.spec = describe_model(MODEL_ID, honest_dir)  # what it claims to serve
        self.runs_dir, self.engine, self.operator = runs_dir, engine, operator
        self.client = CoordinatorClient(address, PLAINTEXT)
        self.client.register(self.identity, HARDWARE, (self.spec,), operator, operator, 2)
        self._assignments = self.client.assignments()

    def serve_next(self) -> str:
        assignment = next(self._assignments)
        job = Job(assignment.job_id, assignment.prompt, assignment.max_tokens,
                  assignment.temperature, assignment.top_p, assignment.seed)
        result = generate(self.engine, self.runs_dir, job)
        self.client.stream_tokens(job.job_id, iter([(0, result.token_ids, result.text)]))
        body = encode_receipt(receipt_for(job, self.identity, MODEL_ID, self.spec.weights_digest, result))
        self.client.report_receipt(job.job_id, body, self.identity.sign(body))
        return job.job_id


def _posted(coordinator: RunningCoordinator, operator: str) -> int:
    with coordinator.service.db.transaction() as session:
        found = balance(session, operator_account_id(OperatorId(operator)))
        return found.net_posted if found else 0


def _credit_state(coordinator: RunningCoordinator, job_id: str) -> str:
    with coordinator.service.db.transaction() as session:
        job = job_rows.job_by_id(session, job_id)
        assert job is not None
        return job_money.job_cost(session, job).operator_credit_state


def test_cheater_is_not_paid_is_quarantined_and_its_jobs_rerun_on_an_honest_node(
        coordinator: RunningCoordinator, tiny_model_dir: Path, other_model_dir: Path,
        engine: Engine) -> None:
    address = f"127.0.0.1:{coordinator.port}"
    service = coordinator.service
    mallory = Node(address, "mallory", tiny_model_dir, other_model_dir, engine)
    with JobClient(address, trust=PLAINTEXT) as consumer:
        submitted = [consumer.submit(MODEL_ID, prompt, max_tokens=40).job_id
                     for prompt in ("In the beginning", "And Noah")]
    cheated = sorted(mallory.serve_next() for _ in submitted)
    assert cheated == sorted(submitted)
    for job_id in cheated:  # completed for the consumer, the credit only held
        check = service.checks.of_job(job_id)
        assert check is not None and check.status is CheckStatus.WAITING
        assert _credit_state(coordinator, job_id) == "pending"

    alice = Node(address, "alice", tiny_model_dir, tiny_model_dir, engine)
    decided = service.checks.run()
    assert sorted(d.job_id for d in decided) == cheated and not any(d.passed for d in decided)
    assert _posted(coordinator, "mallory") == 0
    for job_id in cheated:
        check = service.checks.of_job(job_id)
        assert check is not None and check.status is CheckStatus.FAILED
        assert check.credit_state is CreditState.VOIDED and _credit_state(coordinator, job_id) == "voided"
        assert "committed activations differ" in (check.reason or "")
        evidence = json.loads(check.evidence_json or "{}")
        assert not evidence["passed"] and any(not c["ok"] for c in evidence["chunks"])
        assert check.rerun_job_id is not None
    trust, history = service.checks.of_node(mallory.identity.node_id)
    assert trust.record.checks_failed == 2 and trust.quarantined_at_ms is not None
    assert len(history) == 2

    reruns = sorted(alice.serve_next() for _ in cheated)  # placement skipped mallory
    assert reruns == sorted(service.checks.of_job(j).rerun_job_id for j in cheated)  # type: ignore[union-attr]
    decided = service.checks.run()
    assert sorted(d.job_id for d in decided) == reruns and all(d.passed for d in decided)
    held = sum(service.checks.of_job(j).operator_credit for j in reruns)  # type: ignore[union-attr]
    assert held > 0 and _posted(coordinator, "alice") == held

    with JobClient(address, trust=PLAINTEXT) as consumer:  # quarantined: mallory is never chosen again
        later = consumer.submit(MODEL_ID, "And Abram", max_tokens=8).job_id
    assert alice.serve_next() == later
    mallory.client.close()
    alice.client.close()
