"""The token sender: the first token at once, later ones together, the end flushed at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from node_agent.coordinator_client import Chunk
from node_agent.token_sender import (
    FLUSH_INTERVAL_MAX_S, FLUSH_INTERVAL_S, NODE_MESSAGES_PER_S, SenderThreads, TokenSender, flush_interval_s,
)


THREADS = SenderThreads()  # as a node agent keeps them, for the senders below


class _FakeClient:
    """Reads the token stream as the coordinator would, noting each message."""

    def __init__(self) -> None:
        self.received: list[Chunk] = []
        self.first = threading.Event()

    def stream_tokens(self, job_id: str, chunks: Iterator[Chunk]) -> None:
        for chunk in chunks:
            self.received.append(chunk)
            self.first.set()


def test_the_first_token_goes_alone_and_the_rest_wait_for_company() -> None:
    client = _FakeClient()
    sender = TokenSender(client, "job-1", THREADS, flush_interval_s=600)  # type: ignore[arg-type]
    sender.note_prompt_tokens(5)
    assert sender.offer(0, 10, "a")
    assert client.first.wait(30)
    for index in range(1, 6):
        assert sender.offer(index, 10 + index, "bcdef"[index - 1])
    closing = threading.Thread(target=sender.close)
    closing.start()
    closing.join(60)  # the end flushes at once, not after the interval
    assert not closing.is_alive()
    assert [(c.first_index, c.token_ids, c.text) for c in client.received] == [
        (0, (10,), "a"), (1, (11, 12, 13, 14, 15), "bcdef")]
    assert client.received[0].prompt_tokens == 5
    assert sender.sent == client.received


def test_without_an_interval_only_queued_tokens_merge() -> None:
    client = _FakeClient()
    sender = TokenSender(client, "job-2", THREADS, flush_interval_s=0.0)  # type: ignore[arg-type]
    sender.offer(0, 1, "x")
    assert client.first.wait(30)
    chunks = sender.close()
    assert [(c.first_index, c.token_ids) for c in chunks] == [(0, (1,))]


def test_finish_sends_the_last_tokens_without_waiting_and_close_keeps_them() -> None:
    client = _FakeClient()
    sender = TokenSender(client, "job-3", THREADS, flush_interval_s=600)  # type: ignore[arg-type]
    sender.offer(0, 1, "x")
    assert client.first.wait(30)
    sender.offer(1, 2, "y")
    sender.offer(2, 3, "z")
    sender.finish()
    closing = threading.Thread(target=sender.close)
    closing.start()
    closing.join(60)  # finish() ended the interval's wait
    assert not closing.is_alive()
    assert [(c.first_index, c.token_ids, c.text) for c in client.received] == [
        (0, (1,), "x"), (1, (2, 3), "yz")]
    assert sender.close() == client.received  # closing again changes nothing


class _ThreadNotingClient(_FakeClient):
    def __init__(self) -> None:
        super().__init__()
        self.threads: list[threading.Thread] = []

    def stream_tokens(self, job_id: str, chunks: Iterator[Chunk]) -> None:
        self.threads.append(threading.current_thread())
        super().stream_tokens(job_id, chunks)


def test_senders_run_on_threads_started_before_their_jobs() -> None:
    threads = SenderThreads()
    client = _ThreadNotingClient()
    for job in ("job-4", "job-5", "job-6"):
        already_running = set(threading.enumerate())
        sender = TokenSender(client, job, flush_interval_s=0.0,  # type: ignore[arg-type]
                             threads=threads)
        sender.offer(0, 1, "x")
        assert [(c.first_index, c.token_ids) for c in sender.close()] == [(0, (1,))]
        assert client.threads[-1] in already_running
    assert len(client.threads) == 3


def test_tokens_wait_longer_while_the_node_streams_many_jobs() -> None:
    # A single stream keeps the short wait; a large batch keeps the node near its message rate.
    assert flush_interval_s(0) == flush_interval_s(1) == FLUSH_INTERVAL_S
    many = NODE_MESSAGES_PER_S // 2
    assert flush_interval_s(many) == many / NODE_MESSAGES_PER_S > FLUSH_INTERVAL_S
    assert flush_interval_s(100 * NODE_MESSAGES_PER_S) == FLUSH_INTERVAL_MAX_S
    intervals = [flush_interval_s(n) for n in range(200)]
    assert intervals == sorted(intervals)


def test_sender_threads_count_the_streams_they_carry() -> None:
    threads = SenderThreads()
    release = threading.Event()
    started = threading.Barrier(4)

    def stream() -> None:
        started.wait(30)
        release.wait(30)

    waits = [threads.run(stream) for _ in range(3)]
    started.wait(30)
    assert threads.streams == 3
    release.set()
    for wait in waits:
        assert wait(30)
    assert threads.streams == 0
