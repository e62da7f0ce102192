"""Jobs handed from the transaction that assigned them to their node's open streams, in process.

The database stays the source of truth: a job is published only after the
transaction that assigned it committed, and a node's stream still reads the
database after every wake-up, so a job missed here (a full inbox, another
coordinator assigned it) goes out all the same. What this saves is the
database read between the commit and the node learning of its job.
"""

from __future__ import annotations

import collections
import contextlib
import threading

from coordinator.live.subscribers import Subscribers
from coordinator.model import JobRecord

JOBS_PER_STREAM_MAX = 256  # beyond this a stream drops the oldest; its database read finds them


class AssignmentInbox:
    """One node stream's freshly assigned jobs."""

    def __init__(self) -> None:
        self._jobs: collections.deque[JobRecord] = collections.deque(maxlen=JOBS_PER_STREAM_MAX)
        self._lock = threading.Lock()

    def put(self, job: JobRecord) -> None:
        with self._lock:
            self._jobs.append(job)

    def take(self) -> list[JobRecord]:
        with self._lock:
            jobs = list(self._jobs)
            self._jobs.clear()
            return jobs


class LiveAssignments:
    def __init__(self) -> None:
        self._inboxes: Subscribers[AssignmentInbox] = Subscribers(AssignmentInbox)

    def subscribe(self, node_id: str) -> contextlib.AbstractContextManager[AssignmentInbox]:
        """Jobs published for node_id while the block runs; subscribe before reading the database."""
        return self._inboxes.subscribe(node_id)

    def publish(self, job: JobRecord) -> None:
        """A job whose assignment committed: to the streams of every node it was assigned to."""
        for inbox in self._inboxes.of(job.node_ids):
            inbox.put(job)
