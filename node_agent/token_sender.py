"""Streams a job's tokens to the coordinator while generation runs.

Generation (on the MLX thread) only queues chunks; a sender thread owns the
client-streaming call. Every chunk is also kept, so after a dropped
connection the whole job can be re-sent: chunk indexes make re-sends harmless.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from node_agent.coordinator_client import (
    CallRejected, CoordinatorCallError, CoordinatorClient,
)

Chunk = tuple[int, tuple[int, ...], str]  # (first_index, token_ids, text)
_DONE = None


class TokenSender:
    def __init__(self, client: CoordinatorClient, job_id: str) -> None:
        self._client = client
        self._job_id = job_id
        self._queue: queue.Queue[Chunk | None] = queue.Queue()
        self.chunks: list[Chunk] = []
        self.error: CoordinatorCallError | None = None
        self._thread = threading.Thread(target=self._send, name=f"tokens-{job_id}", daemon=True)
        self._thread.start()

    def _pending(self) -> Iterator[Chunk]:
        while (chunk := self._queue.get()) is not _DONE:
            yield chunk

    def _send(self) -> None:
        try:
            self._client.stream_tokens(self._job_id, self._pending())
        except CoordinatorCallError as error:
            self.error = error

    @property
    def rejected(self) -> bool:
        """The coordinator refused the job's tokens: cancelled or handed back, so stop."""
        return isinstance(self.error, CallRejected)

    def offer(self, index: int, token_id: int, text: str) -> bool:
        """Queue one token; False tells generation to stop."""
        chunk = (index, (token_id,), text)
        self.chunks.append(chunk)
        if self.error is None:
            self._queue.put(chunk)
        return not self.rejected

    def close(self) -> None:
        self._queue.put(_DONE)
        self._thread.join()
