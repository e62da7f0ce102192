"""Where a job's time goes on the node, logged at debug level as one line per job.

Marks are monotonic (perf_counter_ns) offsets from the moment the assignment
arrived, with that moment's wall clock so the line lines up with the
coordinator's timestamps. Recording a mark costs a clock read and an append.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)

MARKS_MAX = 32  # a job's timeline is a handful of steps; a bound keeps a bug from growing it


class JobTimeline:
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self._wall_ms = time.time_ns() // 1_000_000
        self._start_ns = time.perf_counter_ns()
        self._marks: list[tuple[str, int]] = []
        self._lock = threading.Lock()  # the MLX worker and the token sender both mark

    def mark(self, name: str) -> None:
        with self._lock:
            if len(self._marks) < MARKS_MAX:
                self._marks.append((name, time.perf_counter_ns() - self._start_ns))

    def log(self) -> None:
        if not log.isEnabledFor(logging.DEBUG):
            return
        with self._lock:
            steps = " ".join(f"{name}=+{offset_ns / 1e6:.2f}" for name, offset_ns in self._marks)
        log.debug("job %s timeline (ms after its assignment arrived at %d): %s", self.job_id,
                  self._wall_ms, steps)
