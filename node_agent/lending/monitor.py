"""Watches the owner's terms while the agent runs and says when to stop and hand work back.

A thread polls the activity source every poll_seconds and recomputes the
lending state. When the state changes the agent is told at once (it sends a
heartbeat, so the coordinator stops placing work here). A job that is running
when the terms turn against it may go on for handback_after_s; after that the
agent stops it and hands it back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from contracts.lending import LendingState
from node_agent.lending.activity import ActivitySource
from node_agent.lending.config import LendingConfig
from node_agent.lending.policy import lending_state

log = logging.getLogger(__name__)


class LendingMonitor:
    def __init__(self, config: LendingConfig, source: ActivitySource,
                 memory_cap_bytes: int | None = None,
                 on_change: Callable[[LendingState], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], datetime] = datetime.now) -> None:
        self.config = config
        self._source = source
        self._memory_cap_bytes = memory_cap_bytes
        self.on_change = on_change  # set once the agent exists: it heartbeats on every change
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._leaving = False
        self._state = lending_state(config, source(), wall_clock(), memory_cap_bytes)
        self._refused_since: float | None = None if self._state.accepting_jobs else monotonic()
        self.changed = threading.Event()  # set on every change, for anyone waiting on one

    @property
    def state(self) -> LendingState:
        with self._lock:
            return self._state

    def refresh(self) -> LendingState:
        """Read the host once and update the state; tells on_change when it changed."""
        state = lending_state(self.config, self._source(), self._wall_clock(),
                              self._memory_cap_bytes, self._leaving)
        with self._lock:
            changed = state != self._state
            self._state = state
            if state.accepting_jobs:
                self._refused_since = None
            elif self._refused_since is None:
                self._refused_since = self._monotonic()
        if changed:
            log.info("lending: %s", "taking work" if state.accepting_jobs
                     else f"not taking work: {state.reason}")
            self.changed.set()
            if self.on_change is not None:
                self.on_change(state)
        return state

    def leave(self) -> None:
        """Stop taking work for good (mlxnet node leave); running work gets the same bound."""
        with self._lock:
            self._leaving = True
        self.refresh()

    def must_hand_back(self) -> bool:
        """True once work has been refused for longer than the operator's bound."""
        with self._lock:
            since = self._refused_since
        return since is not None and self._monotonic() - since >= self.config.handback_after_s

    def seconds_until_hand_back(self) -> float | None:
        with self._lock:
            since = self._refused_since
        if since is None:
            return None
        return max(0.0, self.config.handback_after_s - (self._monotonic() - since))

    def run(self, stopping: threading.Event) -> None:
        """Poll until stopping is set."""
        while not stopping.wait(self.config.poll_seconds):
            self.refresh()
