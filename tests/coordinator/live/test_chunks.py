"""Chunks handed from the node's stream to live readers: never lost, never doubled."""

from __future__ import annotations

import threading
from pathlib import Path

from coordinator.live.chunks import CHUNKS_PER_READER_MAX, LiveChunks
from coordinator.model import JobStatus, TokenChunk
from coordinator.service import CoordinatorService, JobView
from coordinator.storage import job_rows, node_rows
from node_agent.identity import load_or_create_identity
from tests.coordinator.service.test_service import SMALL, _register, _submission, service  # noqa: F401


def _chunk(first: int, count: int = 1) -> TokenChunk:
    return TokenChunk(first, tuple(range(first, first + count)), "x" * count)


def test_a_reader_takes_what_continues_where_it_is() -> None:
    live = LiveChunks()
    with live.subscribe("j") as reader:
        live.publish("j", [_chunk(0, 2), _chunk(2), _chunk(3)])
        assert [c.first_index for c in reader.take(0)] == [0, 2, 3]
        assert reader.take(4) == []
        live.publish("j", [_chunk(4), _chunk(5)])
        assert [c.first_index for c in reader.take(5)] == [5]  # 4 came from the database


def test_a_gap_sends_the_reader_to_the_database() -> None:
    live = LiveChunks()
    with live.subscribe("j") as reader:
        live.publish("j", [_chunk(3), _chunk(4)])
        assert reader.take(1) == []  # 1 and 2 are missing here
        assert [c.first_index for c in reader.take(3)] == [3, 4]


def test_a_slow_reader_loses_the_oldest_and_finds_a_gap() -> None:
    live = LiveChunks()
    with live.subscribe("j") as reader:
        live.publish("j", [_chunk(i) for i in range(CHUNKS_PER_READER_MAX + 1)])
        assert reader.take(0) == []
        assert len(reader.take(1)) == CHUNKS_PER_READER_MAX


def test_only_subscribed_readers_of_the_job_get_chunks() -> None:
    live = LiveChunks()
    live.publish("j", [_chunk(0)])  # nobody listens: dropped
    with live.subscribe("j") as reader, live.subscribe("other") as other:
        live.publish("j", [_chunk(1)])
        assert reader.take(0) == [] and [c.first_index for c in reader.take(1)] == [1]
        assert other.take(1) == []
    live.publish("j", [_chunk(2)])  # after the block: no reader left to hold it
    assert reader.take(2) == []


def test_stream_job_yields_each_stored_chunk_once(tmp_path: Path,
                                                  service: CoordinatorService) -> None:  # noqa: F811
    node_id = _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    job_id = service.jobs.submit(_submission(max_tokens=64)).job.job_id
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    streamed: list[TokenChunk | JobView] = []
    first_read = threading.Event()

    def read() -> None:
        for item in service.jobs.stream(job_id, lambda: True):
            streamed.append(item)
            first_read.set()

    service.nodes.accept_tokens(node, job_id, TokenChunk(0, (1, 2), "ab"))  # before the reader: database
    reader = threading.Thread(target=read)
    reader.start()
    first_read.wait(30)
    for index in range(2, 40):
        service.nodes.accept_tokens(node, job_id, TokenChunk(index, (index,), f"<{index}>"))
        service.nodes.accept_tokens(node, job_id, TokenChunk(index, (index,), f"<{index}>"))  # a re-send
    service.jobs.cancel(job_id)
    reader.join(30)
    with service.db.transaction() as session:
        stored = job_rows.token_chunks(session, job_id)
    assert streamed[:-1] == stored and len(stored) == 39
    final = streamed[-1]
    assert isinstance(final, JobView) and final.job.status is JobStatus.FAILED


def _node(service: CoordinatorService, node_id: str):  # type: ignore[no-untyped-def]
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    return node


def test_a_watched_stream_misses_nothing_and_starts_without_a_read(
        tmp_path: Path, service: CoordinatorService) -> None:  # noqa: F811
    """The submitter's watch subscribes before the job commits: chunks stored before the
    stream starts still come, and the stream's first look needs no database read."""
    node = _node(service, _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,)))
    view, watch = service.jobs.submit_watched(_submission(max_tokens=64))
    assert watch is not None and view.job.status is JobStatus.ASSIGNED
    job_id = view.job.job_id
    service.nodes.accept_tokens(node, job_id, TokenChunk(0, (1, 2), "ab"))  # before the stream starts
    reads = service.db.read_transactions_begun
    stream = service.jobs.stream(job_id, lambda: True, watch=watch)
    assert next(stream) == TokenChunk(0, (1, 2), "ab") and service.db.read_transactions_begun == reads
    service.nodes.accept_tokens(node, job_id, TokenChunk(2, (3,), "c"))
    assert next(stream) == TokenChunk(2, (3,), "c") and service.db.read_transactions_begun == reads
    service.jobs.cancel(job_id)
    final = list(stream)
    assert isinstance(final[-1], JobView) and final[-1].job.status is JobStatus.FAILED
    service.core.live_chunks.publish(job_id, [_chunk(3)])  # the watch was closed with the stream
    assert watch.take(3) == []


def test_a_watched_job_that_fails_before_its_stream_starts_ends_at_once(
        tmp_path: Path, service: CoordinatorService) -> None:  # noqa: F811
    _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    view, watch = service.jobs.submit_watched(_submission(max_tokens=64))
    assert watch is not None
    service.jobs.cancel(view.job.job_id)  # notified before the stream's first wait
    ended = threading.Event()
    items: list[TokenChunk | JobView] = []

    def read() -> None:
        items.extend(service.jobs.stream(view.job.job_id, lambda: True, watch=watch))
        ended.set()

    threading.Thread(target=read, daemon=True).start()
    # Well under the poll interval: the wake-up since the watch subscribed is not missed.
    assert ended.wait(service.config.stream_poll_interval_s / 2)
    assert isinstance(items[-1], JobView) and items[-1].job.status is JobStatus.FAILED


def test_a_queued_job_gets_no_watch(tmp_path: Path, service: CoordinatorService) -> None:  # noqa: F811
    _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    first, first_watch = service.jobs.submit_watched(_submission(max_tokens=64))
    view, watch = service.jobs.submit_watched(_submission(max_tokens=64))  # the one Mac is busy
    assert first_watch is not None and first.job.status is JobStatus.ASSIGNED
    assert watch is None and view.job.status is JobStatus.QUEUED
    first_watch.close()
