"""Which assignments this node holds now, so a re-sent one is not run twice at once.

The coordinator re-sends a node's assigned jobs on every new assignment stream, so an
assignment can arrive again while its job waits or runs here: that copy is dropped. Once
the node is done with a job it forgets it: the coordinator may hand the same job back to
this node later (after a hand-back or its own restart), and that assignment must run.
"""

from __future__ import annotations

import threading


class ActiveJobs:
    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()  # the stream admits, the worker and reporter finish

    def admit(self, job_id: str) -> bool:
        """True for an assignment to run; False when this job is already waiting or running here."""
        with self._lock:
            if job_id in self._ids:
                return False
            self._ids.add(job_id)
            return True

    def finish(self, job_id: str) -> None:
        """The node is done with the job: a later assignment of it runs again."""
        with self._lock:
            self._ids.discard(job_id)

    def clear(self) -> None:
        with self._lock:
            self._ids.clear()
