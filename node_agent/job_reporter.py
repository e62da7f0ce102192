"""Finishes generated jobs on a thread of their own, so the MLX worker starts the next job.

Once a job's last token is queued the worker hands it here and moves on. What is
left takes no MLX: closing the token stream (re-sending it after a break), the
activation commitment's arithmetic, signing the receipt and its round trip to the
coordinator. Jobs finish in the order they were handed over, one at a time.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from node_agent.coordinator_client import Assignment
from node_agent.inference.engine import GenerationResult
from node_agent.job_timeline import JobTimeline
from node_agent.token_mux import MuxSender
from node_agent.token_sender import TokenSender

log = logging.getLogger(__name__)

GENERATED_JOBS_MAX = 64  # a full queue makes the worker wait: the coordinator is not keeping up


@dataclass(frozen=True)
class Generated:
    """A job whose tokens are all queued; its receipt is still to be made and reported."""

    assignment: Assignment
    result: GenerationResult
    sender: TokenSender | MuxSender
    timeline: JobTimeline


class JobReporter:
    def __init__(self, finish: Callable[[Generated], None]) -> None:
        self._finish = finish
        self._queue: queue.Queue[Generated] = queue.Queue(GENERATED_JOBS_MAX)
        self._unfinished = 0
        self._idle = threading.Condition()
        threading.Thread(target=self._run, name="job-reporter", daemon=True).start()

    def hand_over(self, job: Generated) -> None:
        with self._idle:
            self._unfinished += 1
        self._queue.put(job)

    def wait_until_idle(self, timeout_s: float) -> bool:
        """Block until every handed-over job is finished (or timeout); True when all are."""
        with self._idle:
            return self._idle.wait_for(lambda: self._unfinished == 0, timeout_s)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                self._finish(job)
            finally:
                with self._idle:
                    self._unfinished -= 1
                    self._idle.notify_all()
