"""The node's one token stream: many jobs' chunks per message, each job's refusal its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from node_agent.coordinator_client import CallRejected, Chunk, CoordinatorUnavailable
from node_agent.token_mux import TokenMux
from protos.mlxnet.v1 import node_pb2


class _FakeClient:
    """Answers each message as the coordinator would: refusing the jobs in `refuse`, and
    breaking the call after `break_after` messages (None: never)."""

    def __init__(self, refuse: frozenset[str] = frozenset(), break_after: int | None = None,
                 code: str | None = None) -> None:
        self.refuse, self.break_after, self.code = refuse, break_after, code
        self.messages: list[node_pb2.StreamNodeTokensRequest] = []
        self.calls = 0
        self.received = threading.Condition()

    def token_chunk_pb(self, job_id: str, c: Chunk, cached_prompt_tokens: int = 0) -> node_pb2.StreamTokensRequest:
        return node_pb2.StreamTokensRequest(job_id=job_id, first_index=c.first_index, token_ids=c.token_ids,
                                            text=c.text, prompt_tokens=c.prompt_tokens,
                                            cached_prompt_tokens=cached_prompt_tokens)

    def stream_node_tokens(self, messages: Iterator[node_pb2.StreamNodeTokensRequest]
                           ) -> Iterator[node_pb2.StreamNodeTokensResponse]:
        self.calls += 1
        if self.code is not None:
            raise CallRejected(self.code, "no such method")
        for message in messages:
            if self.break_after is not None and len(self.messages) >= self.break_after:
                raise CoordinatorUnavailable("UNAVAILABLE: restarting")
            with self.received:
                self.messages.append(message)
                self.received.notify_all()
            yield node_pb2.StreamNodeTokensResponse(sequence=message.sequence, refused=[
                node_pb2.JobTokensRefused(job_id=c.job_id, code="ALREADY_EXISTS", message="cancelled")
                for c in message.chunks if c.job_id in self.refuse])

    def wait_for(self, count: int) -> None:
        with self.received:
            assert self.received.wait_for(lambda: len(self.messages) >= count, 30)

    def stored(self, job_id: str) -> list[int]:
        return [t for m in self.messages for c in m.chunks if c.job_id == job_id for t in c.token_ids]


def _close(sender) -> list[Chunk]:  # type: ignore[no-untyped-def]
    closed: list[list[Chunk]] = []
    closing = threading.Thread(target=lambda: closed.append(sender.close()))
    closing.start()
    closing.join(30)
    assert not closing.is_alive(), "close waits only for the answers to its chunks"
    return closed[0]


def test_jobs_share_messages_and_each_keeps_its_own_tokens() -> None:
    client = _FakeClient()
    # Tokens are due at once, but messages wait 600 s unless a job starts or ends.
    mux = TokenMux(client, message_interval_s=600, chunk_interval_s=0.0)  # type: ignore[arg-type]
    a, b = mux.sender("job-a"), mux.sender("job-b")
    a.note_prompt_tokens(3)
    a.note_cached_prompt_tokens(2)
    assert a.offer(0, 100, "a0")
    client.wait_for(1)  # a first token goes at once
    for index in range(1, 4):
        assert a.offer(index, 100 + index, f"a{index}")
    b.note_prompt_tokens(4)
    assert b.offer(0, 200, "b0")
    client.wait_for(2)
    for index in range(1, 3):
        assert b.offer(index, 200 + index, f"b{index}")
    a.finish()  # its tokens went with b's first: nothing left to send
    b.finish()
    chunks_a, chunks_b = _close(a), _close(b)
    assert client.stored("job-a") == [100, 101, 102, 103] and client.stored("job-b") == [200, 201, 202]
    assert [c.token_ids for c in chunks_a] == [(100,), (101, 102, 103)]
    assert [c.token_ids for c in chunks_b] == [(200,), (201, 202)]
    first_a = client.messages[0].chunks[0]
    assert (first_a.prompt_tokens, first_a.cached_prompt_tokens) == (3, 2)
    assert [[c.job_id for c in m.chunks] for m in client.messages] == [["job-a"], ["job-a", "job-b"], ["job-b"]]
    assert a.error is None and b.error is None and client.calls == 1


def test_a_refused_job_stops_and_the_others_go_on() -> None:
    client = _FakeClient(refuse=frozenset({"job-x"}))
    mux = TokenMux(client, message_interval_s=0.0, chunk_interval_s=0.0)  # type: ignore[arg-type]
    x, y = mux.sender("job-x"), mux.sender("job-y")
    x.offer(0, 1, "x")
    y.offer(0, 2, "y")
    _wait(lambda: x.rejected)
    assert not x.offer(1, 3, "x")  # generation stops
    assert y.offer(1, 4, "y")
    chunks = _close(y)
    assert y.error is None and [t for c in chunks for t in c.token_ids] == [2, 4]
    assert client.stored("job-y") == [2, 4]
    assert isinstance(x.error, CallRejected) and x.error.code == "ALREADY_EXISTS"
    _close(x)


def test_a_broken_stream_leaves_every_job_its_chunks_to_re_send() -> None:
    client = _FakeClient(break_after=1)
    mux = TokenMux(client, message_interval_s=0.0, chunk_interval_s=0.0)  # type: ignore[arg-type]
    a = mux.sender("job-a")
    a.offer(0, 1, "a")
    client.wait_for(1)
    a.offer(1, 2, "b")
    _wait(lambda: a.error is not None)
    assert not a.rejected, "the stream's fault: the job goes on and re-sends its tokens"
    a.offer(2, 3, "c")
    assert [t for c in _close(a) for t in c.token_ids] == [1, 2, 3]
    client.break_after = None
    fresh = mux.sender("job-b")  # the next job opens a new call
    fresh.offer(0, 9, "z")
    _close(fresh)
    assert client.calls == 2 and client.stored("job-b") == [9] and fresh.error is None


def test_a_coordinator_without_the_stream_is_noted() -> None:
    client = _FakeClient(code="UNIMPLEMENTED")
    mux = TokenMux(client)  # type: ignore[arg-type]
    sender = mux.sender("job-a")
    sender.offer(0, 1, "a")
    _close(sender)
    assert not mux.supported and not sender.rejected and isinstance(sender.error, CoordinatorUnavailable)


def _wait(condition) -> None:  # type: ignore[no-untyped-def]
    done = threading.Event()
    for _ in range(3000):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not met in 30 s")


class _Recorded:
    def __init__(self, token_ids: tuple[int, ...]) -> None:
        self.token_ids = token_ids


def test_a_partial_receipt_rides_on_the_chunk_that_completes_its_tokens() -> None:
    client = _FakeClient()
    mux = TokenMux(client, message_interval_s=0.0, chunk_interval_s=0.0)  # type: ignore[arg-type]
    proofs: list[tuple[int, ...]] = []

    def prove(token_ids: tuple[int, ...], recorded: object) -> tuple[bytes, bytes]:
        proofs.append(token_ids)
        return b"body", b"signature"

    sender = mux.sender("job-p", prover=prove)
    sender.note_proven(_Recorded((1, 2)))
    sender.offer(0, 1, "a")
    client.wait_for(1)
    sender.offer(1, 2, "b")
    chunks = _close(sender)
    assert proofs == [(1, 2)]
    assert [c.partial_receipt for c in chunks] == [None, (b"body", b"signature")]


def test_a_steps_first_tokens_go_together_in_one_message() -> None:
    """Within firsts_together() (a batch step), every job's first token waits for the step's end
    and all go in one message: one coordinator transaction, not one per job. Outside a step a
    first token still goes at once."""
    client = _FakeClient()
    mux = TokenMux(client, message_interval_s=600, chunk_interval_s=0.0)  # type: ignore[arg-type]
    alone = mux.sender("job-alone")
    assert alone.offer(0, 7, "x")
    client.wait_for(1)  # the stream is open, and idle until woken
    assert [c.job_id for c in client.messages[0].chunks] == ["job-alone"]
    senders = [mux.sender(f"job-{i}") for i in range(8)]
    with mux.firsts_together():
        for i, sender in enumerate(senders):
            assert sender.offer(0, 100 + i, f"t{i}")
        assert len(client.messages) == 1  # nothing more is written before the step ends
    client.wait_for(2)
    assert [c.job_id for c in client.messages[1].chunks] == [f"job-{i}" for i in range(8)]
    for sender in (*senders, alone):
        sender.finish()
        _close(sender)
