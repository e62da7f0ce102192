"""Every job's tokens on one stream to the coordinator (StreamNodeTokens).

A call per job cost the coordinator a transaction and gRPC's and the gateway's thread
hand-offs per message, on the same cores a batch decodes on. Here one call carries the
node's jobs: a message holds a chunk of each job that is due, the coordinator stores it
in one transaction, and its answer acknowledges the message and names the jobs refused
(cancelled, handed back), which stop while the others go on.

A job's tokens still wait for company as TokenSender's do (flush_interval_s of the jobs
open), so a consumer reads a few tokens per chunk; the stream itself sends at most one
message a MESSAGE_INTERVAL_S, with every job then due, except that a job's first token
and a job's end go at once.

Should the stream break, its jobs keep their chunks (with the boundaries sent) and are
re-sent whole, a call per job, once generated (JobReports.resend_tokens), as a broken
TokenSender's are. A coordinator without StreamNodeTokens gets a call per job from then on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from contracts import hop_trace
from contracts.limits import CHUNKS_PER_NODE_MESSAGE_MAX
from contracts.logprobs import TokenLogprob
from node_agent.coordinator_client import (
    CallRejected, Chunk, CoordinatorCallError, CoordinatorClient, CoordinatorUnavailable,
)
from node_agent.job_timeline import JobTimeline
from node_agent.token_sender import (
    CHUNK_TOKENS_MAX, FIRST_WRITE_WAIT_S, Prover, _let_sender_run, flush_interval_s,
)
from protos.mlxnet.v1 import node_pb2

log = logging.getLogger(__name__)
MESSAGE_INTERVAL_S = 0.1  # the stream's messages: at most 10 a second (and firsts, ends), each a transaction
MESSAGE_BYTES_MAX = 1 << 20  # well under gRPC's 4 MiB a message, logprobs and receipts included


class MuxSender:
    """One job's tokens on the node's stream: TokenSender's interface, without its own call."""

    def __init__(self, mux: TokenMux, job_id: str, timeline: JobTimeline | None = None,
                 prover: Prover | None = None) -> None:
        self._mux = mux
        self.job_id = job_id
        self._timeline = timeline
        self._prover = prover
        self._proven: Any = None
        self._token_ids: list[int] = []
        self._queued: list[Chunk] = []  # offered, not yet taken into a message (under the mux's lock)
        self._queued_since = 0.0  # when the oldest queued token came
        self.sent: list[Chunk] = []  # taken into messages, merged as sent
        self.error: CoordinatorCallError | None = None
        self._prompt_tokens = 0
        self._cached_prompt_tokens = 0  # noted, not yet sent
        self._logprobs: dict[int, TokenLogprob] = {}
        self.ended = False
        self.detached = False  # the mux takes nothing more of it (refused, broken or done)
        self._unacked = 0  # messages with a chunk of it, not yet answered
        self._written = threading.Event()
        self._settled = threading.Event()  # every chunk taken is answered, or never will be

    # --- generation's side (the MLX thread) -----------------------------------------------

    def note_prompt_tokens(self, count: int) -> None:
        self._prompt_tokens = count

    def note_cached_prompt_tokens(self, count: int) -> None:
        self._cached_prompt_tokens = count

    def note_logprob(self, index: int, logprob: TokenLogprob) -> None:
        self._logprobs[index] = logprob

    def note_proven(self, recorded: Any) -> None:
        self._proven = recorded

    def offer(self, index: int, token_id: int, text: str) -> bool:
        """Queue one token; False tells generation to stop."""
        logprob = self._logprobs.pop(index, None)
        chunk = Chunk(index, (token_id,), text,
                      () if logprob is None else (dataclasses.replace(logprob, text=text),),
                      self._prompt_tokens if index == 0 else 0)
        if index == 0 and self._mux.gathering_firsts(self):  # written with the step's other firsts
            self._mux.queue(self, chunk, urgent=False)
            return not self.rejected
        self._mux.queue(self, chunk, urgent=index == 0)
        if index == 0:  # the consumer waits for it: let the stream write it first (bounded)
            self._written.wait(FIRST_WRITE_WAIT_S)
        return not self.rejected

    def finish(self) -> None:
        """No more tokens come: what is queued goes out now."""
        if not self.ended:
            self._mux.end(self)
            _let_sender_run()

    def close(self) -> list[Chunk]:
        """Wait until every chunk taken is stored (or refused, or the stream broke); returns
        every chunk, with the boundaries already sent kept."""
        self.finish()
        self._settled.wait()
        return self._mux.release(self)

    @property
    def rejected(self) -> bool:
        """The coordinator refused the job's tokens: cancelled or handed back, so stop."""
        return isinstance(self.error, CallRejected)

    # --- the mux's side (under its lock) --------------------------------------------------

    def due(self, now: float, interval_s: float) -> bool:
        return bool(self._queued) and not self.detached and (
            not self.sent or self.ended or now - self._queued_since >= interval_s)

    def take(self) -> tuple[int, int]:
        """The queued tokens as one chunk (up to CHUNK_TOKENS_MAX), kept as sent at once (a
        break re-sends it); returns its place in `sent` and its size, roughly, in bytes."""
        chunk, count = self._queued[0], 1
        while count < len(self._queued) and len(chunk.token_ids) < CHUNK_TOKENS_MAX:
            chunk, count = chunk.merged(self._queued[count]), count + 1
        del self._queued[:count]
        self._queued_since = time.monotonic()
        self.sent.append(chunk)
        self._unacked += 1
        proven = self._proven
        size = (len(chunk.text) * 4 + 16 * (len(chunk.token_ids) + sum(len(e.top) for e in chunk.logprobs))
                + (0 if proven is None else 1024 + 16 * len(proven.token_ids)))
        return len(self.sent) - 1, size

    def seal(self, place: int) -> Chunk:
        """Off the mux's lock (signing takes a while): the chunk taken at `place`, with the
        partial receipt its tokens complete, if any."""
        chunk = self.sent[place]
        if place == 0:
            hop_trace.job_hop(self.job_id, "first chunk sent")
            if self._timeline is not None:
                self._timeline.mark("first_chunk_to_grpc")
        self._token_ids.extend(chunk.token_ids)
        proven = self._proven
        if proven is None or self._prover is None or len(self._token_ids) < len(proven.token_ids):
            return chunk
        self._proven = None
        tokens = tuple(self._token_ids[:len(proven.token_ids)])
        if tokens != proven.token_ids:
            return chunk
        chunk = dataclasses.replace(chunk, partial_receipt=self._prover(tokens, proven))
        self.sent[place] = chunk  # one item replaced: a release meanwhile copies either
        return chunk

    def cached_to_send(self) -> int:
        count, self._cached_prompt_tokens = self._cached_prompt_tokens, 0
        return count


class TokenMux:
    """The node's one token stream, opened when a job first needs it and again after a break."""

    def __init__(self, client: CoordinatorClient, message_interval_s: float = MESSAGE_INTERVAL_S,
                 chunk_interval_s: float | None = None) -> None:
        """chunk_interval_s: how long a job's token waits for company (None: flush_interval_s
        of the jobs open)."""
        self._client = client
        self._message_interval_s = message_interval_s
        self._chunk_interval_s = chunk_interval_s
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._senders: list[MuxSender] = []  # attached: the stream takes their tokens
        self._in_flight: dict[int, list[MuxSender]] = {}  # sequence -> senders with a chunk in it
        self._open = False  # a call is running (its reader thread owns it)
        self._call_id = 0
        self.supported = True  # False once the coordinator answered UNIMPLEMENTED
        self._firsts: list[MuxSender] | None = None  # first tokens offered within firsts_together()

    def sender(self, job_id: str, timeline: JobTimeline | None = None,
               prover: Prover | None = None) -> MuxSender:
        sender = MuxSender(self, job_id, timeline, prover)
        with self._lock:
            self._senders.append(sender)
            if not self._open:
                self._open = True
                self._call_id += 1
                threading.Thread(target=self._run_call, args=(self._call_id,), name="token-mux",
                                 daemon=True).start()
        return sender

    @property
    def streams(self) -> int:
        return len(self._senders)

    @contextlib.contextmanager
    def firsts_together(self) -> Iterator[None]:
        """Around a batch step, on the MLX thread: the first tokens its jobs offer go in one message
        once it ends, and generation waits for that write once (bounded). Each waited for its own
        write: 32 jobs' first tokens went as 32 messages, each a coordinator transaction, and the
        last reached its consumer about 100 ms after the first."""
        self._firsts = []
        try:
            yield
        finally:
            firsts, self._firsts = self._firsts, None
            if firsts:
                with self._lock:
                    self._wake.notify()
                deadline = time.monotonic() + FIRST_WRITE_WAIT_S
                for sender in firsts:
                    sender._written.wait(max(0.0, deadline - time.monotonic()))

    def gathering_firsts(self, sender: MuxSender) -> bool:
        """Within firsts_together(): note the sender's first token, to be written with the others."""
        if self._firsts is None:
            return False
        self._firsts.append(sender)
        return True

    def queue(self, sender: MuxSender, chunk: Chunk, urgent: bool) -> None:
        with self._lock:
            if not sender._queued:
                sender._queued_since = time.monotonic()
            sender._queued.append(chunk)
            if urgent:
                self._wake.notify()

    def end(self, sender: MuxSender) -> None:
        with self._lock:
            sender.ended = True
            if not sender._queued and not sender._unacked:
                self._detach(sender)
            self._wake.notify()

    def release(self, sender: MuxSender) -> list[Chunk]:
        with self._lock:
            self._detach(sender)
            unsent, sender._queued = sender._queued, []
            return sender.sent + unsent

    def _detach(self, sender: MuxSender) -> None:
        """Under the lock: nothing more of it is taken, and close() need wait no longer."""
        sender.detached = True
        if sender in self._senders:
            self._senders.remove(sender)
        sender._settled.set()

    # --- the call ---------------------------------------------------------------------------

    def _run_call(self, call_id: int) -> None:
        """The call's reader: acknowledgements and refusals, until the call ends."""
        error: CoordinatorCallError | None = None
        try:
            for response in self._client.stream_node_tokens(self._messages(call_id)):
                self._answered(response)
        except CoordinatorCallError as failure:
            error = failure
        except Exception as failure:  # noqa: BLE001 (logged, and the jobs fall back, not lost)
            log.exception("token stream failed")
            error = CoordinatorUnavailable(f"token stream failed: {failure}")
        self._broken(call_id, error or CoordinatorUnavailable("token stream ended"))

    def _messages(self, call_id: int) -> Iterator[node_pb2.StreamNodeTokensRequest]:
        """Run by gRPC's request thread: a message whenever jobs are due."""
        sequence = 0
        last_sent = 0.0
        backlog = False
        while True:
            with self._lock:
                while True:
                    if self._call_id != call_id or not self._open:
                        return
                    now = time.monotonic()
                    interval = self._interval_s()
                    due = [s for s in self._senders if s.due(now, interval)]
                    urgent = any(not s.sent or s.ended for s in due)
                    if due and (urgent or backlog or now - last_sent >= self._message_interval_s):
                        break
                    self._wake.wait(self._message_interval_s if self._senders else None)
                sequence += 1
                taken = self._take(due)
                backlog = len(taken) < len(due)  # the rest go at once, in the next message
                self._in_flight[sequence] = [sender for sender, _, _ in taken]
            message = node_pb2.StreamNodeTokensRequest(sequence=sequence, chunks=[
                self._client.token_chunk_pb(sender.job_id, sender.seal(place), cached)
                for sender, place, cached in taken])
            last_sent = time.monotonic()
            yield message
            for sender, _, _ in taken:
                sender._written.set()

    def _take(self, due: list[MuxSender]) -> list[tuple[MuxSender, int, int]]:
        """Under the lock: a chunk of each due job, within a message's limits (the rest go
        next), as (sender, its place in sender.sent, prompt tokens cached)."""
        taken: list[tuple[MuxSender, int, int]] = []
        size = 0
        for sender in due[:CHUNKS_PER_NODE_MESSAGE_MAX]:
            place, chunk_size = sender.take()
            taken.append((sender, place, sender.cached_to_send()))
            size += chunk_size
            if size >= MESSAGE_BYTES_MAX:
                break
        return taken

    def _interval_s(self) -> float:
        if self._chunk_interval_s is not None:
            return self._chunk_interval_s
        return flush_interval_s(len(self._senders))

    def _answered(self, response: node_pb2.StreamNodeTokensResponse) -> None:
        refused = {entry.job_id: entry for entry in response.refused}
        with self._lock:
            for sender in self._in_flight.pop(response.sequence, ()):
                sender._unacked -= 1
                entry = refused.get(sender.job_id)
                if entry is not None and sender.error is None:
                    sender.error = CallRejected(entry.code, entry.message)
                    self._detach(sender)
                elif sender.ended and not sender._queued and not sender._unacked:
                    self._detach(sender)

    def _broken(self, call_id: int, error: CoordinatorCallError) -> None:
        """The call ended: its jobs keep their chunks for a re-send; the next job opens a new call."""
        if isinstance(error, CallRejected) and error.code == "UNIMPLEMENTED":
            self.supported = False
        if not isinstance(error, CoordinatorUnavailable):  # the stream's fault, not a job's: go on
            error = CoordinatorUnavailable(str(error))
        with self._lock:
            if self._call_id != call_id:
                return
            self._open = False
            self._wake.notify_all()
            self._in_flight.clear()
            broken, self._senders = self._senders, []
            for sender in broken:
                if sender.error is None:
                    sender.error = error
                sender.detached = True
                sender._settled.set()
        if broken:
            log.warning("token stream broke (%s); %d jobs will re-send their tokens", error, len(broken))
