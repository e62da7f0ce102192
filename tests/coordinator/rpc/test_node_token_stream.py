"""One token stream per node (StreamNodeTokens) against a real coordinator, SQLite and PostgreSQL.

Messages carry chunks of several jobs at once, in random interleavings; some jobs are
cancelled part-way and some chunks are malformed. Every job's stored tokens, its text and its
consumer's stream hold exactly its own tokens, and one job's refusal never ends another.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from contracts.hardware import ChipTier, HardwareReport
from contracts.models import ModelSpec
from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from coordinator.server import RunningCoordinator, start
from coordinator.storage import job_rows
from coordinator.verification.peers import PeerCheckPolicy
from mlxnet.consumer import JobClient, StreamedTokens
from node_agent.coordinator_client import Assignment, Chunk, CoordinatorClient
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import job_pb2, node_pb2
from tests.node_registration import operator_key_for

PLAINTEXT = CoordinatorTrust(insecure=True)
VOCAB = 32_000
MODEL = ModelSpec(model_id="fake/model", weights_bytes=10_000_000, parameter_count=2_500_000,
                  num_layers=4, num_attention_heads=4, num_kv_heads=4, head_dim=64,
                  max_context_tokens=2048, weights_digest="ab" * 32, vocab_size=VOCAB)
HARDWARE = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO,
                          memory_bytes=64 << 30, gpu_working_set_bytes=48 << 30, gpu_cores=20,
                          memory_bandwidth_gb_s=273.0, os_name="macOS (simulated)", simulated=True)
JOBS_MAX = 4
MAX_TOKENS = 24


@pytest.fixture
def coordinator(database_url: str) -> Iterator[RunningCoordinator]:
    # The node sends no heartbeats here: liveness is not under test, so it may not lapse mid-run.
    running = start(CoordinatorConfig(database_url=database_url, stream_poll_interval_s=0.2,
                                      node_offline_after_ms=3_600_000,
                                      allow_anonymous=True, peer_checks=PeerCheckPolicy(enabled=False)))
    try:
        yield running
    finally:
        running.stop(grace_s=0)


def _token(job: int, index: int) -> int:
    """Job k's token i: no two jobs share one, so a token in the wrong job shows."""
    return 1000 * (job + 1) + index


def _text(job: int, index: int) -> str:
    return f"<{job}.{index}>"


# A step: ("send", [(job, tokens, bad)]) a message with a chunk for each named job (bad: a token
# id outside the vocabulary, which refuses that chunk alone), or ("cancel", job).
_send = st.tuples(st.just("send"), st.lists(
    st.tuples(st.integers(0, JOBS_MAX - 1), st.integers(1, 4), st.sampled_from([False, False, False, True])),
    min_size=1, max_size=JOBS_MAX))
_cancel = st.tuples(st.just("cancel"), st.integers(0, JOBS_MAX - 1))
_steps = st.lists(st.one_of(_send, _send, _send, _cancel), min_size=1, max_size=10)


@dataclass
class _Job:
    job_id: str
    tokens: list[int] = field(default_factory=list)  # stored, in order
    text: str = ""
    cancelled: bool = False
    streamed: list[int] = field(default_factory=list)  # what its consumer's stream read
    streamed_text: str = ""


def _read_stream(address: str, job: _Job) -> None:
    with JobClient(address, trust=PLAINTEXT) as consumer:
        for item in consumer.stream(job.job_id):
            if isinstance(item, StreamedTokens):
                job.streamed.extend(item.token_ids)
                job.streamed_text += item.text


def test_one_stream_carries_many_jobs_and_keeps_each_its_own(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    address = f"127.0.0.1:{coordinator.port}"
    identity = load_or_create_identity(tmp_path / "node" / "identity.pem")
    node = CoordinatorClient(address, PLAINTEXT)
    node.register(identity, HARDWARE, (MODEL,), "alice", "node", JOBS_MAX,
                  operator_key=operator_key_for(coordinator.service, "alice"))
    assignments = node.assignments()

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck),
              phases=(Phase.explicit, Phase.reuse, Phase.generate))  # shrinking re-runs whole jobs: minutes
    @given(jobs_count=st.integers(2, JOBS_MAX), steps=_steps)
    def run(jobs_count: int, steps: list) -> None:
        with JobClient(address, trust=PLAINTEXT) as consumer:
            jobs = [_Job(consumer.submit(MODEL.model_id, f"prompt {k}", max_tokens=MAX_TOKENS).job_id)
                    for k in range(jobs_count)]
            assigned = set()
            while len(assigned) < jobs_count:
                assignment = next(assignments)
                assert isinstance(assignment, Assignment)
                assigned.add(assignment.job_id)
            assert assigned == {job.job_id for job in jobs}
            readers = [threading.Thread(target=_read_stream, args=(address, job)) for job in jobs]
            for reader in readers:
                reader.start()
            messages: list[node_pb2.StreamNodeTokensRequest] = []
            expected_refused: list[set[str]] = []
            for step in steps:
                if step[0] == "cancel":
                    if step[1] < jobs_count and not jobs[step[1]].cancelled:
                        _send_all(node, messages, expected_refused, jobs)  # what came before the cancel
                        consumer.cancel(jobs[step[1]].job_id)
                        jobs[step[1]].cancelled = True
                    continue
                message, refused = _message(node, step[1], jobs, len(messages) + 1)
                if message is not None:
                    messages.append(message)
                    expected_refused.append(refused)
            _send_all(node, messages, expected_refused, jobs)
            for job in jobs:  # the end: every reader's stream ends with its job
                if not job.cancelled:
                    consumer.cancel(job.job_id)
            for reader in readers:
                reader.join(timeout=30)
                assert not reader.is_alive()
            for job in jobs:
                with coordinator.service.db.read_transaction() as session:
                    stored = [t for c in job_rows.token_chunks(session, job.job_id) for t in c.token_ids]
                assert stored == job.tokens, "every token stored is its own job's, in order"
                final = consumer.get(job.job_id)
                assert final.text == job.text
                assert final.status == job_pb2.JOB_STATUS_FAILED  # a cancel fails the job
                assert job.streamed == job.tokens and job.streamed_text == job.text

    run()
    node.close()


def _message(node: CoordinatorClient, entries: list, jobs: list[_Job], sequence: int
             ) -> tuple[node_pb2.StreamNodeTokensRequest | None, set[str]]:
    """A message of the entries for jobs that exist, and the jobs the coordinator must refuse;
    the model (each job's tokens) moves as the coordinator will."""
    message = node_pb2.StreamNodeTokensRequest(sequence=sequence)
    refused: set[str] = set()
    for index, size, bad in entries:
        if index >= len(jobs):
            continue
        job = jobs[index]
        if job.job_id in refused:  # a refused job's later chunks in the message are dropped
            continue
        start = len(job.tokens)
        tokens = [_token(index, start + i) for i in range(size)]
        if start + size > MAX_TOKENS:
            continue
        text = "".join(_text(index, start + i) for i in range(size))
        if bad:
            tokens[-1] = VOCAB + 5
        message.chunks.append(node.token_chunk_pb(
            job.job_id, Chunk(start, tuple(tokens), text, (), 2 if start == 0 else 0)))
        if bad or job.cancelled:
            refused.add(job.job_id)
        else:
            job.tokens.extend(tokens)
            job.text += text
    return (message if message.chunks else None), refused


def _send_all(node: CoordinatorClient, messages: list[node_pb2.StreamNodeTokensRequest],
              expected_refused: list[set[str]], jobs: list[_Job]) -> None:
    """Send the messages on one stream; each answer names exactly the jobs refused in it."""
    if not messages:
        return
    answers = list(node.stream_node_tokens(iter(messages)))
    assert [a.sequence for a in answers] == [m.sequence for m in messages]
    for answer, refused in zip(answers, expected_refused):
        assert {r.job_id for r in answer.refused} == refused
        for entry in answer.refused:
            cancelled = any(job.cancelled and job.job_id == entry.job_id for job in jobs)
            assert entry.code == ("ALREADY_EXISTS" if cancelled else "INVALID_ARGUMENT")
    messages.clear()
    expected_refused.clear()
