"""A job cut off mid-stream: the consumer pays only for tokens it received and a verified
partial receipt proves, and the operator is paid only for those (issue 28, item 2)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.errors import PermissionDenied
from coordinator.model import DELIVERY_WHOLE, JobRecord, JobStatus, SignedReceipt, TokenChunk
from coordinator.money.epochs import expected_credits
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows
from coordinator.verification import store as check_store
from ledger.full_audit import audit
from ledger.policy import price_job
from node_agent.identity import Identity, load_or_create_identity
from tests.coordinator.gateway.service_harness import (
    MODEL,
    consumer_balance,
    make_service,
    new_consumer,
    register_node,
)
from tests.proof_helpers import signed_partial_receipt

MLX = 10**9
PROMPT_TOKENS = 4


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    service = make_service(database_url)
    yield service
    service.db.dispose()


@pytest.fixture
def identity(tmp_path: Path) -> Identity:
    return load_or_create_identity(tmp_path / "node.pem")


def _job(service: CoordinatorService, job_id: str) -> JobRecord:
    with service.db.transaction() as session:
        job = job_rows.job_by_id(session, job_id)
    assert job is not None
    return job


def _audit_differences(service: CoordinatorService) -> list[str]:
    with service.db.transaction() as session:
        report = audit(session, expected_credits=list(expected_credits(session)))
    return [f"[{d.check}] {d.subject}: {d.detail}" for d in report.differences]


def _operator_credit(service: CoordinatorService, job_id: str) -> tuple[int, str]:
    cost = service.jobs.cost(job_id, None)
    return cost.operator_credit, cost.operator_credit_state


def _node_vanishes(service: CoordinatorService) -> None:
    service.clock.ms += service.config.node_offline_after_ms + 1  # type: ignore[attr-defined]
    service.nodes.reap_offline()


def test_streaming_copies_of_one_token_and_no_receipt_earns_nothing(
        service: CoordinatorService, identity: Identity) -> None:
    """The cheat of issue 28: max_tokens - 1 copies of one token, no receipt, a failure."""
    node = register_node(service, identity, 4)
    consumer = new_consumer(service, "acme")
    job = service.jobs.submit(consumer.submission(max_tokens=40), consumer.caller).job
    copies = (7,) * (job.max_tokens - 1)
    service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, copies, "x" * len(copies)),
                                prompt_tokens=PROMPT_TOKENS)
    service.nodes.accept_failure(node, job.job_id, "out of memory")
    assert _operator_credit(service, job.job_id) == (0, "")
    after = consumer_balance(service, "acme")
    assert (after.debits_pending, after.available) == (0, MLX)
    assert _job(service, job.job_id).billing_closed_at_ms is not None
    assert _audit_differences(service) == []


def test_a_node_that_dies_mid_stream_is_paid_for_what_its_partial_receipt_proves(
        service: CoordinatorService, identity: Identity) -> None:
    node = register_node(service, identity, 4)
    consumer = new_consumer(service, "acme")
    job = service.jobs.submit(consumer.submission(max_tokens=40), consumer.caller).job
    service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, (1, 2, 3), "abc"),
                                prompt_tokens=PROMPT_TOKENS)
    proof = signed_partial_receipt(identity, job, (1, 2, 3, 4, 5), PROMPT_TOKENS,
                                   MODEL.weights_digest, service.clock.now_ms())
    service.nodes.accept_tokens(node, job.job_id, TokenChunk(3, (4, 5), "de"), partial=proof)
    service.nodes.accept_tokens(node, job.job_id, TokenChunk(5, (6,), "f"))  # past the proof
    _node_vanishes(service)

    price = price_job(MODEL.parameter_count, PROMPT_TOKENS, 5)
    failed = _job(service, job.job_id)
    assert failed.status is JobStatus.FAILED and "stopped mid-stream" in (failed.error or "")
    assert (failed.completion_tokens, failed.receipt_verified) == (5, True)
    assert _operator_credit(service, job.job_id) == (price.operator_credit, "pending")
    after = consumer_balance(service, "acme")
    assert (after.debits_pending, after.available) == (0, MLX - price.consumer_charge)
    with service.db.transaction() as session:
        check = check_store.check_by_job(session, job.job_id)
    assert check is not None and check.operator_credit == price.operator_credit
    assert _audit_differences(service) == []


def test_a_partial_receipt_that_does_not_verify_pays_nothing(
        service: CoordinatorService, identity: Identity, tmp_path: Path) -> None:
    node = register_node(service, identity, 4)
    consumer = new_consumer(service, "acme")
    job = service.jobs.submit(consumer.submission(max_tokens=40), consumer.caller).job
    honest = signed_partial_receipt(identity, job, (1, 2, 3), PROMPT_TOKENS, MODEL.weights_digest,
                                    service.clock.now_ms())
    other = load_or_create_identity(tmp_path / "other.pem")
    wrong_tokens = signed_partial_receipt(identity, job, (9, 9, 9), PROMPT_TOKENS,
                                          MODEL.weights_digest, service.clock.now_ms())
    for forged in (SignedReceipt(honest.body, other.sign(honest.body)), wrong_tokens):
        service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, (1, 2, 3), "abc"),
                                    prompt_tokens=PROMPT_TOKENS, partial=forged)
    service.nodes.accept_failure(node, job.job_id, "crashed", partial=wrong_tokens)
    assert _operator_credit(service, job.job_id) == (0, "")
    assert consumer_balance(service, "acme").available == MLX
    assert _audit_differences(service) == []


def test_a_non_streaming_consumer_that_got_no_text_pays_nothing(
        service: CoordinatorService, identity: Identity) -> None:
    """Issue 28: the non-streaming consumer got no text, yet was charged for 25 tokens."""
    node = register_node(service, identity, 4)
    consumer = new_consumer(service, "acme")
    job = service.jobs.submit(consumer.submission(max_tokens=40, delivery=DELIVERY_WHOLE),
                              consumer.caller).job
    tokens = tuple(range(1, 26))
    proof = signed_partial_receipt(identity, job, tokens, PROMPT_TOKENS, MODEL.weights_digest,
                                   service.clock.now_ms())
    service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, tokens, "t" * 25),
                                prompt_tokens=PROMPT_TOKENS, partial=proof)
    _node_vanishes(service)
    assert _job(service, job.job_id).status is JobStatus.FAILED
    assert consumer_balance(service, "acme").available == MLX
    assert _operator_credit(service, job.job_id) == (0, "")
    assert _audit_differences(service) == []


def test_a_final_receipt_cannot_pass_for_a_partial_one_nor_the_reverse(
        service: CoordinatorService, identity: Identity) -> None:
    node = register_node(service, identity, 4)
    consumer = new_consumer(service, "acme")
    job = service.jobs.submit(consumer.submission(max_tokens=40), consumer.caller).job
    service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, (1, 2, 3), "abc"),
                                prompt_tokens=PROMPT_TOKENS)
    partial = signed_partial_receipt(identity, job, (1, 2, 3), PROMPT_TOKENS, MODEL.weights_digest,
                                     service.clock.now_ms())
    with pytest.raises(Exception, match="partial receipt must say CUT_OFF"):
        service.nodes.accept_receipt(node, job.job_id, partial.body, partial.signature)
    assert _job(service, job.job_id).status is JobStatus.RUNNING


def test_a_report_from_a_stale_attempt_is_refused_by_its_fencing_token(
        service: CoordinatorService, identity: Identity) -> None:
    node = register_node(service, identity, 4)
    consumer = new_consumer(service, "acme")
    job = service.jobs.submit(consumer.submission(max_tokens=40), consumer.caller).job
    assert job.attempt == 1
    with pytest.raises(PermissionDenied, match="attempt 7 of job"):
        service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, (1,), "a"), attempt=7)
    with pytest.raises(PermissionDenied, match="attempt 7 of job"):
        service.nodes.accept_failure(node, job.job_id, "stale", attempt=7)
    assert service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, (1,), "a"), attempt=1)
    assert _job(service, job.job_id).status is JobStatus.RUNNING
