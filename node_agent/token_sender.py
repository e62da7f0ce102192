"""Streams a job's tokens to the coordinator while generation runs.

Generation (on the MLX thread) only queues chunks; a sender thread owns the
client-streaming call. Every chunk is also kept, with the same boundaries it
was sent with, so after a dropped connection the whole job can be re-sent:
the coordinator stores each first index once.

The first token goes at once; later ones wait for company and go together, so
the coordinator stores (and the consumer reads) a few tokens per message rather
than one: each message costs the coordinator a transaction and gRPC's and the
gateway's thread hand-offs, about 3.5 ms of its CPU on the 2-core benchmark
machine, which decoding there loses (and a coordinator serving many nodes pays
per stream). The job's end flushes at once.

How long a token waits (flush_interval_s) grows with the streams the node has
open: in a batch each job gets fewer tokens a second, so a fixed interval sends
one token a message, and the node's message rate (the coordinator's cost) grows
with its batch. The wait keeps the node near NODE_MESSAGES_PER_S, within
FLUSH_INTERVAL_S and FLUSH_INTERVAL_MAX_S.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from contracts import hop_trace
from contracts.logprobs import TokenLogprob
from node_agent.coordinator_client import (
    CallRejected, Chunk, CoordinatorCallError, CoordinatorClient,
)
from node_agent.job_timeline import JobTimeline

log = logging.getLogger(__name__)
_DONE = None
CHUNK_TOKENS_MAX = 256  # stays well under the coordinator's per-chunk limit
# Longest a token waits for company: text arrives 10 times a second, faster than it is read.
# 50 ms cost decoding 5-9% beside the coordinator (bench.gateway: 90.5-94.1% of direct
# against 96.8-99.7% at 100 ms, runs alternated).
FLUSH_INTERVAL_S = 0.1
# A node's messages a second over all its streams, as far as the longest wait allows: 50 at
# 3.5 ms each is a sixth of a core of the coordinator (bench.concurrency measures it).
NODE_MESSAGES_PER_S = 50
FLUSH_INTERVAL_MAX_S = 1.0  # text still arrives every second in the largest batch
FIRST_WRITE_WAIT_S = 0.005  # longest generation waits for its first token to be written


def _let_sender_run() -> None:
    """Give up the GIL now: generation goes straight on to Python work for its next step, and
    the waiting sender would otherwise get the GIL only at the 5 ms switch interval."""
    time.sleep(0)


def flush_interval_s(streams: int) -> float:
    """How long a token waits for company while the node streams this many jobs."""
    assert streams >= 0
    return min(FLUSH_INTERVAL_MAX_S, max(FLUSH_INTERVAL_S, streams / NODE_MESSAGES_PER_S))


# prover(token_ids, recorded): a signed partial receipt (body, signature) over those tokens.
Prover = Callable[[tuple[int, ...], Any], tuple[bytes, bytes]]


class TokenSender:
    def __init__(self, client: CoordinatorClient, job_id: str, threads: SenderThreads,
                 flush_interval_s: float | None = None,
                 timeline: JobTimeline | None = None, prover: Prover | None = None) -> None:
        """threads: where the sender runs, on a thread already started (starting one waits
        until it runs, milliseconds on a busy machine, before the first token can go).
        prover: signs partial receipts as the job goes (note_proven), so work cut off by a
        fault can still be proven and paid; each rides on the chunk that completes its tokens."""
        self._client = client
        self._prover = prover
        self._proven: Any = None  # the latest record noted, not yet sent
        self._token_ids: list[int] = []  # every token yielded so far, in order
        self._timeline = timeline
        self._job_id = job_id
        self._flush_interval_s = flush_interval_s
        self._threads = threads
        self._queue: queue.Queue[Chunk | None] = queue.Queue()
        self.sent: list[Chunk] = []  # as yielded to the call, merged or not
        self.error: CoordinatorCallError | None = None
        self._prompt_tokens = 0
        self._cached_prompt_tokens = 0
        self._logprobs: dict[int, TokenLogprob] = {}  # noted by generation, sent with the token
        self._ended = threading.Event()  # finish() was called: stop waiting for company
        self._written = threading.Event()  # a chunk went out on the call
        self._wait_sent = threads.run(self._send)

    def _pending(self) -> Iterator[Chunk]:
        """Chunks as queued; those that come within the flush interval go out merged.

        The thread sleeps out the interval and then takes what came, rather than waking
        for every token: it shares the CPU with generation.
        """
        while True:
            chunk = self._queue.get()
            if chunk is _DONE:
                return
            if self.sent:  # the first token goes at once
                self._ended.wait(self._interval_s())
            chunk, done = self._merge_queued(chunk)
            chunk = self._with_partial_receipt(chunk)
            self.sent.append(chunk)
            if len(self.sent) == 1:
                hop_trace.job_hop(self._job_id, "first chunk sent")
            if self._timeline is not None and len(self.sent) == 1:
                self._timeline.mark("first_chunk_to_grpc")
            yield chunk
            self._written.set()  # gRPC asks for the next chunk once it has written this one
            if done:
                return

    def _interval_s(self) -> float:
        if self._flush_interval_s is not None:
            return self._flush_interval_s
        return flush_interval_s(self._threads.streams)

    def _with_partial_receipt(self, chunk: Chunk) -> Chunk:
        """The chunk, carrying a partial receipt once its tokens complete the latest proven record."""
        self._token_ids.extend(chunk.token_ids)
        proven = self._proven
        if proven is None or self._prover is None or len(self._token_ids) < len(proven.token_ids):
            return chunk
        self._proven = None
        tokens = tuple(self._token_ids[:len(proven.token_ids)])
        if tokens != proven.token_ids:  # not what was streamed (a re-send): prove nothing
            return chunk
        return dataclasses.replace(chunk, partial_receipt=self._prover(tokens, proven))

    def note_proven(self, recorded: Any) -> None:
        """Generation recorded the states of its first tokens (recorded.token_ids): the next
        chunk that completes them carries a partial receipt over them."""
        self._proven = recorded

    def _merge_queued(self, chunk: Chunk) -> tuple[Chunk, bool]:
        """The chunk with the tokens queued behind it (up to the limit); True once the end came."""
        while len(chunk.token_ids) < CHUNK_TOKENS_MAX:
            try:
                following = self._queue.get_nowait()
            except queue.Empty:
                return chunk, False
            if following is _DONE:
                return chunk, True
            chunk = chunk.merged(following)
        return chunk, False

    def _send(self) -> None:
        try:
            self._client.stream_tokens(self._job_id, self._pending())
        except CoordinatorCallError as error:
            self.error = error
            return
        if self._cached_prompt_tokens:  # after the tokens (off the first token's path), before the result
            try:
                self._client.report_prompt_cache(self._job_id, self._cached_prompt_tokens)
            except CoordinatorCallError as error:  # a figure for the consumer's usage: the job goes on
                log.warning("job %s: prompt cache hits not reported: %s", self._job_id, error)

    @property
    def rejected(self) -> bool:
        """The coordinator refused the job's tokens: cancelled or handed back, so stop."""
        return isinstance(self.error, CallRejected)

    def note_cached_prompt_tokens(self, count: int) -> None:
        """Of the prompt, the tokens reused from the prompt cache; reported once the tokens are sent."""
        self._cached_prompt_tokens = count

    def note_prompt_tokens(self, count: int) -> None:
        """The prompt's length, sent with the first chunk (before any offer)."""
        self._prompt_tokens = count

    def note_logprob(self, index: int, logprob: TokenLogprob) -> None:
        """Token `index`'s logprobs, sent with it once offered."""
        self._logprobs[index] = logprob

    def offer(self, index: int, token_id: int, text: str) -> bool:
        """Queue one token; False tells generation to stop."""
        logprob = self._logprobs.pop(index, None)
        self._queue.put(Chunk(index, (token_id,), text,
                              () if logprob is None else (dataclasses.replace(logprob, text=text),),
                              self._prompt_tokens if index == 0 else 0))
        if index == 0:
            # The consumer waits for this one: let the sender write it before generation takes
            # the GIL back for its next step (bounded, should the call be slow to open).
            self._written.wait(FIRST_WRITE_WAIT_S)
        return not self.rejected

    def finish(self) -> None:
        """No more tokens come: what is queued goes out now, and the call ends."""
        if not self._ended.is_set():
            self._ended.set()
            self._queue.put(_DONE)
            _let_sender_run()

    def close(self) -> list[Chunk]:
        """Finish the call; returns every chunk, with the boundaries already sent kept."""
        self.finish()
        self._wait_sent()
        unsent = []
        while True:
            chunk = self._queue.get_nowait() if not self._queue.empty() else _DONE
            if chunk is _DONE:
                break
            unsent.append(chunk)
        return self.sent + unsent


class SenderThreads:
    """Daemon threads for TokenSenders, one always started and idle ahead of the next job.

    A sender holds its thread for its job's whole stream. The thread that takes the last
    idle place starts the next spare itself, so no job's start waits for a thread to start.
    """

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._busy = 0  # threads running a task: the node's open token streams
        self._start_thread()

    def _start_thread(self) -> None:
        with self._lock:
            self._idle += 1
        threading.Thread(target=self._serve, name="tokens", daemon=True).start()

    def _serve(self) -> None:
        while True:
            task = self._tasks.get()
            with self._lock:
                self._idle -= 1
                last_idle = self._idle == 0
            if last_idle:
                self._start_thread()
            task()
            with self._lock:
                self._idle += 1

    @property
    def streams(self) -> int:
        """Tasks running now (each a job's token stream)."""
        return self._busy

    def run(self, task: Callable[[], None]) -> Callable[[], None]:
        """Run task on an idle thread; returns a function that waits until it has run."""
        done = threading.Event()

        def run_then_signal() -> None:
            with self._lock:
                self._busy += 1
            try:
                task()
            finally:
                with self._lock:
                    self._busy -= 1
                done.set()

        self._tasks.put(run_then_signal)
        return done.wait
