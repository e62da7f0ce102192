"""Token chunks handed from a node's token stream to the same job's readers, in process.

The database stays the source of truth: a chunk is published only after the
transaction that stored it committed. A live reader takes the chunks that
continue exactly where it is; on any gap (it fell behind its bound, another
coordinator stored the chunk, a hand-back restarted the job) it reads the
database as before, so nothing is lost or doubled.
"""

from __future__ import annotations

import base64
import binascii
import collections
import contextlib
import json
import threading

from coordinator.live.subscribers import Subscribers
from coordinator.model import TokenChunk

CHUNKS_PER_READER_MAX = 1024  # beyond this a slow reader drops the oldest and reads the database


class LiveReader:
    """One reader's view of a job's freshly stored chunks."""

    def __init__(self) -> None:
        self._chunks: collections.deque[TokenChunk] = collections.deque(
            maxlen=CHUNKS_PER_READER_MAX)
        self._lock = threading.Lock()

    def put(self, chunks: list[TokenChunk]) -> None:
        with self._lock:
            self._chunks.extend(chunks)

    def take(self, next_index: int) -> list[TokenChunk]:
        """The chunks that continue from next_index; [] when there are none or there is a gap."""
        with self._lock:
            while self._chunks and self._chunks[0].first_index < next_index:
                self._chunks.popleft()  # read from the database meanwhile, or straddling: see there
            taken: list[TokenChunk] = []
            while self._chunks and self._chunks[0].first_index == next_index:
                chunk = self._chunks.popleft()
                taken.append(chunk)
                next_index += len(chunk.token_ids)
            return taken


class LiveChunks:
    def __init__(self) -> None:
        self._readers: Subscribers[LiveReader] = Subscribers(LiveReader)

    def subscribe(self, job_id: str) -> contextlib.AbstractContextManager[LiveReader]:
        """Chunks published for job_id while the block runs; subscribe before reading the database."""
        return self._readers.subscribe(job_id)

    def publish(self, job_id: str, chunks: list[TokenChunk]) -> None:
        """Chunks of job_id whose transaction committed, in index order."""
        for reader in self._readers.of((job_id,)):
            reader.put(chunks)


# A chunk rides to other coordinators on the relay as a topic (live.pg_relay), so their
# readers need not read it back from the database; bigger ones, and those with logprobs,
# go as a plain wake-up and are read there.
CHUNK_TOPIC_PREFIX = "chunk:"
CHUNK_TOPIC_CHARS_MAX = 6_000  # under a NOTIFY payload's limit with room for the origin


def chunk_topic(job_id: str, chunk: TokenChunk) -> str | None:
    """The committed chunk as a relay topic, or None when it does not travel that way."""
    if chunk.logprobs:
        return None
    body = json.dumps({"j": job_id, "i": chunk.first_index, "t": chunk.token_ids,
                       "x": chunk.text}, separators=(",", ":")).encode()
    topic = CHUNK_TOPIC_PREFIX + base64.urlsafe_b64encode(body).decode()
    return topic if len(topic) <= CHUNK_TOPIC_CHARS_MAX else None


def chunk_of_topic(topic: str) -> tuple[str, TokenChunk] | None:
    """(job id, chunk) of a chunk topic; None for any other topic or a malformed one."""
    if not topic.startswith(CHUNK_TOPIC_PREFIX):
        return None
    try:
        fields = json.loads(base64.urlsafe_b64decode(topic[len(CHUNK_TOPIC_PREFIX):]))
        chunk = TokenChunk(int(fields["i"]), tuple(int(t) for t in fields["t"]), str(fields["x"]))
        return str(fields["j"]), chunk
    except (binascii.Error, ValueError, KeyError, TypeError):
        return None  # from a coordinator of another version: its readers go to the database
