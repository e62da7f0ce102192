"""A job's end reaching the coordinator: the signed receipt, failures, hand-backs and their retries."""

from __future__ import annotations

import threading
from pathlib import Path

from contracts.models import ModelSpec
from contracts.receipts import FinishReason, decode_receipt, output_digest, prompt_digest
from contracts.signing import signature_is_valid
from node_agent.coordinator_client import Assignment, Chunk
from node_agent.identity import Identity, load_or_create_identity
from node_agent.inference.engine import GenerationResult
from node_agent.job_reports import JobReports
from node_agent.job_timeline import JobTimeline
from tests.node_agent.fake_coordinator import FakeCoordinator, Record

SPEC = ModelSpec(model_id="m", weights_bytes=1, parameter_count=1, num_layers=1,
                 num_attention_heads=1, num_kv_heads=1, head_dim=1, max_context_tokens=16,
                 weights_digest="00" * 32)
ASSIGNMENT = Assignment("job-1", SPEC, "In the beginning", 4, 0.5, 0.9, 7)
RESULT = GenerationResult(token_ids=(3, 4, 5), text="abc", prompt_tokens=2, started_at_ms=10,
                          finished_at_ms=20, stopped_early=False,
                          finish_reason=FinishReason.END_TOKEN, first_token_at_ms=12,
                          activation_commitment=b"\x01\x02")


def _reports(tmp_path: Path, coordinator: FakeCoordinator,
             record: Record) -> tuple[JobReports, Identity]:
    identity = load_or_create_identity(tmp_path / "identity.pem")
    stopping = threading.Event()
    return JobReports(coordinator, identity, record.job_finished, stopping), identity


def test_the_receipt_is_signed_over_the_assignment_and_the_result(tmp_path: Path) -> None:
    coordinator, record = FakeCoordinator(), Record()
    reports, identity = _reports(tmp_path, coordinator, record)
    timeline = JobTimeline("job-1")
    assert reports.receipt(ASSIGNMENT, RESULT, timeline) == 700
    [(job_id, body, signature)] = coordinator.receipts
    assert job_id == "job-1" and signature_is_valid(identity.public_key_raw, body, signature)
    receipt = decode_receipt(body)
    assert (receipt.node_id, receipt.model_id, receipt.seed, receipt.max_tokens) == (
        identity.node_id, "m", 7, 4)
    assert receipt.prompt_digest == prompt_digest("In the beginning")
    assert receipt.output_digest == output_digest((3, 4, 5)) and receipt.completion_tokens == 3
    assert receipt.finish_reason is FinishReason.END_TOKEN and receipt.first_token_at_ms == 12
    assert receipt.activation_commitment == b"\x01\x02"
    assert record.finished == [("job-1", 700)]


def test_reports_are_retried_while_the_coordinator_is_unreachable(tmp_path: Path) -> None:
    coordinator, record = FakeCoordinator(unavailable=2), Record()
    reports, _ = _reports(tmp_path, coordinator, record)
    reports.resend_tokens("job-1", [Chunk(0, (3,), "a")])
    assert coordinator.streams == [("job-1", [Chunk(0, (3,), "a")])]
    assert reports.receipt(ASSIGNMENT, RESULT) == 700 and len(coordinator.receipts) == 1


def test_a_refused_receipt_leaves_the_job_unpaid(tmp_path: Path) -> None:
    coordinator, record = FakeCoordinator(refuse=True), Record()
    reports, _ = _reports(tmp_path, coordinator, record)
    assert reports.receipt(ASSIGNMENT, RESULT) is None
    assert record.finished == [("job-1", None)]


def test_failures_and_hand_backs_say_which_they_are(tmp_path: Path) -> None:
    coordinator, record = FakeCoordinator(), Record()
    reports, _ = _reports(tmp_path, coordinator, record)
    reports.failure("job-1", "too long", prompt_too_long=True)
    reports.hand_back("job-2", "the owner came back")
    assert coordinator.failures == [("job-1", "too long", False, True),
                                    ("job-2", "the owner came back", True, False)]
    assert record.finished == [("job-1", None), ("job-2", None)]


def test_reports_stop_when_the_agent_stops(tmp_path: Path) -> None:
    coordinator, record = FakeCoordinator(unavailable=1000), Record()
    identity = load_or_create_identity(tmp_path / "identity.pem")
    stopping = threading.Event()
    stopping.set()
    reports = JobReports(coordinator, identity, record.job_finished, stopping)
    assert reports.receipt(ASSIGNMENT, RESULT) is None and coordinator.receipts == []
