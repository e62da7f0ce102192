"""A freshly assigned job travels to the coordinator holding its node's stream with its wake-up."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.ids import JobId, NodeId
from coordinator.live.assignments import (
    ASSIGNMENT_TOPIC_CHARS_MAX, assignment_topic, job_of_topic,
)
from coordinator.live.notifier import node_topic
from coordinator.live.pg_relay import parse_payload, payloads
from coordinator.model import JobRecord, JobStatus
from coordinator.service import CoordinatorService
from tests.coordinator.nodes.test_admission import service  # noqa: F401 (the fixture)

JOB = JobRecord(job_id=JobId("job-1"), consumer_id="acme", request_id="r1", model_id="m", prompt="Hi ✓\n",
                max_tokens=8, temperature=0.7, top_p=0.9, seed=42, min_decode_tokens_per_s=0.0,
                context_tokens=12, status=JobStatus.ASSIGNED, created_at_ms=1, strategy="single",
                explanation_json='{"why": "fastest"}', attempt=2, node_ids=(NodeId("n1"), NodeId("n2")),
                stop=("\n\n", "END"), top_logprobs=3, assigned_at_ms=5, reserved_base_units=70)


@settings(max_examples=200)
@given(prompt=st.text(max_size=6_000), stop=st.lists(st.text(max_size=20), max_size=4),
       temperature=st.floats(0, 2), seed=st.integers(0, 2**63 - 1),
       layer_split=st.lists(st.integers(0, 200), max_size=4))
def test_an_assignment_topic_gives_back_the_same_job_or_is_not_made(
        prompt: str, stop: list[str], temperature: float, seed: int, layer_split: list[int]) -> None:
    job = dataclasses.replace(JOB, prompt=prompt, stop=tuple(stop), temperature=temperature, seed=seed,
                              layer_split=tuple(layer_split))
    topic = assignment_topic(job)
    if topic is None:  # too big for a NOTIFY: the receiving stream reads the database instead
        assert len(prompt.encode()) > ASSIGNMENT_TOPIC_CHARS_MAX // 2
        return
    assert " " not in topic and len(topic) <= ASSIGNMENT_TOPIC_CHARS_MAX
    [payload] = payloads("origin@1", [topic, node_topic("n1")])  # the job before its wake-up
    assert parse_payload(payload).topics == (topic, node_topic("n1"))
    assert job_of_topic(topic) == job


def test_only_a_fresh_assignment_travels_and_anything_else_is_read_from_the_database() -> None:
    assert assignment_topic(dataclasses.replace(JOB, status=JobStatus.RUNNING)) is None
    assert assignment_topic(dataclasses.replace(JOB, partial_receipt_body=b"x")) is None
    assert job_of_topic("job:job-1") is None and job_of_topic("assign:not-base64!") is None
    assert job_of_topic("assign:" + "e30=") is None  # "{}": no fields
    assert job_of_topic("assign:" + "eyJ4IjogMX0=") is None  # {"x": 1}: another version's fields


def test_a_relayed_assignment_reaches_its_nodes_stream_without_a_read(service: CoordinatorService) -> None:  # noqa: F811
    core = service.core
    topic = assignment_topic(JOB)
    assert topic is not None
    with core.live_assignments.subscribe("n1") as inbox, core.live_assignments.subscribe("n3") as other:
        woken = core.notifier.version(node_topic("n1"))
        core.hear_relayed(topic, node_topic("n1"), node_topic("n2"))
        assert inbox.take() == [JOB] and other.take() == []
        assert core.notifier.version(node_topic("n1")) == woken + 1  # and the stream was woken
