"""Jobs handed from the transaction that assigned them to their node's open streams, in process.

The database stays the source of truth: a job is published only after the
transaction that assigned it committed, and a node's stream still reads the
database after every wake-up, so a job missed here (a full inbox, another
coordinator assigned it) goes out all the same. What this saves is the
database read between the commit and the node learning of its job.
"""

from __future__ import annotations

import base64
import binascii
import collections
import contextlib
import dataclasses
import json
import threading

from coordinator.live.subscribers import Subscribers
from coordinator.model import JobRecord, JobStatus

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


# A freshly assigned job rides to the other coordinators on the relay as a topic (live.pg_relay),
# so the one holding its node's stream hands it over without reading it back from the database.
ASSIGNMENT_TOPIC_PREFIX = "assign:"
ASSIGNMENT_TOPIC_CHARS_MAX = 6_000  # under a NOTIFY payload's limit with room for the origin
_TUPLE_FIELDS = ("layer_split", "node_ids", "stop")


def assignment_topic(job: JobRecord) -> str | None:
    """The assigned job as a relay topic, or None when it does not travel that way (too big
    a prompt, or bytes a fresh assignment does not have): the receiver then reads it."""
    fields = dataclasses.asdict(job)
    if job.status is not JobStatus.ASSIGNED or any(isinstance(v, bytes) for v in fields.values()):
        return None
    body = json.dumps(fields, separators=(",", ":")).encode()
    topic = ASSIGNMENT_TOPIC_PREFIX + base64.urlsafe_b64encode(body).decode()
    return topic if len(topic) <= ASSIGNMENT_TOPIC_CHARS_MAX else None


def job_of_topic(topic: str) -> JobRecord | None:
    """The job an assignment topic carries; None for any other topic or a malformed one."""
    if not topic.startswith(ASSIGNMENT_TOPIC_PREFIX):
        return None
    try:
        fields = json.loads(base64.urlsafe_b64decode(topic[len(ASSIGNMENT_TOPIC_PREFIX):]))
        for name in _TUPLE_FIELDS:
            fields[name] = tuple(fields[name])
        fields["status"] = JobStatus(fields["status"])
        job = JobRecord(**fields)
    except (binascii.Error, ValueError, KeyError, TypeError):
        return None  # from a coordinator of another version: the node's stream reads the database
    return job if job.status is JobStatus.ASSIGNED else None
