"""The leader's pod job: the run's tokens stream as one Mac's do, and its end is reported once."""

from __future__ import annotations

import threading
from pathlib import Path

from contracts.models import ModelSpec
from contracts.receipts import decode_receipt, output_digest
from node_agent.coordinator_client import Assignment, Chunk
from node_agent.identity import load_or_create_identity
from node_agent.inference.engine import GenerationResult
from node_agent.job_reports import JobReports
from node_agent.pods.leader import lead_pod_job
from node_agent.pods.outcome import PodJobResult
from node_agent.token_sender import SenderThreads, TokenSender
from tests.node_agent.fake_coordinator import FakeCoordinator, Record

SPEC = ModelSpec(model_id="m", weights_bytes=1, parameter_count=1, num_layers=2,
                 num_attention_heads=2, num_kv_heads=2, head_dim=1, max_context_tokens=16,
                 weights_digest="00" * 32)
ASSIGNMENT = Assignment("pod-job", SPEC, "p", 2, 0.0, 1.0, 0, strategy="tensor", pod_id="pod-1",
                        pod_leader_node_id="leader", pod_node_ids=("leader", "member"))
RESULT = GenerationResult(token_ids=(5, 6), text="ab", prompt_tokens=1, started_at_ms=1,
                          finished_at_ms=2, stopped_early=False)
THREADS = SenderThreads()


def _streaming(outcome: PodJobResult):  # type: ignore[no-untyped-def]
    """A pod run that streams rank 0's two tokens, then ends as given."""
    def run(assignment: Assignment, sender: TokenSender) -> PodJobResult:
        sender.note_prompt_tokens(1)
        sender.offer(0, 5, "a")
        sender.offer(1, 6, "b")
        return outcome
    return run


def _lead(tmp_path: Path, coordinator: FakeCoordinator, outcome: PodJobResult) -> Record:
    record = Record()
    reports = JobReports(coordinator, load_or_create_identity(tmp_path / "identity.pem"),
                         record.job_finished, threading.Event())
    sender = TokenSender(coordinator, ASSIGNMENT.job_id, THREADS,  # type: ignore[arg-type]
                         flush_interval_s=0.0)
    lead_pod_job(ASSIGNMENT, sender, _streaming(outcome), reports)
    return record


def _tokens(coordinator: FakeCoordinator) -> tuple[int, ...]:
    return tuple(t for _, chunks in coordinator.streams for chunk in chunks for t in chunk.token_ids)


def test_a_finished_pod_run_streams_its_tokens_and_reports_its_receipt(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    record = _lead(tmp_path, coordinator, PodJobResult(result=RESULT))
    assert _tokens(coordinator) == (5, 6)
    [(job_id, body, _)] = coordinator.receipts
    assert job_id == "pod-job" and decode_receipt(body).output_digest == output_digest((5, 6))
    assert record.finished == [("pod-job", 700)]


def test_a_broken_stream_is_sent_again_before_the_receipt(tmp_path: Path) -> None:
    coordinator = FakeCoordinator(unavailable=1)  # the streaming call fails once
    record = _lead(tmp_path, coordinator, PodJobResult(result=RESULT))
    [(_, resent)] = coordinator.streams  # the failed call read none of the chunks
    assert resent == [Chunk(0, (5,), "a", (), 1), Chunk(1, (6,), "b")]
    assert len(coordinator.receipts) == 1
    assert record.finished == [("pod-job", 700)]


def test_a_dead_member_hands_the_job_back_and_a_long_prompt_fails_it(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    _lead(tmp_path, coordinator, PodJobResult(handed_back_reason="pod rank 1 failed"))
    _lead(tmp_path, coordinator, PodJobResult(failure_reason="too long", prompt_too_long=True))
    assert coordinator.failures == [("pod-job", "pod rank 1 failed", True, False),
                                    ("pod-job", "too long", False, True)]
    assert coordinator.receipts == []


def test_a_cancelled_pod_run_reports_nothing(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    record = _lead(tmp_path, coordinator, PodJobResult())  # the coordinator refused more tokens
    assert coordinator.receipts == [] and coordinator.failures == [] and record.finished == []
