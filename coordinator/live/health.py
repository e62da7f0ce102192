"""The coordinator's health: each background loop says whether it can do its work.

A supervised loop (coordinator.background) reports each pass: ok, or failing with the error.
The process is healthy while every loop is; gRPC health (server.py) and the gateway's
`/healthz` follow it, so a load balancer stops sending work while the database is away.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

ERROR_CHARS_MAX = 500


@dataclass(frozen=True)
class LoopHealth:
    name: str
    healthy: bool
    failing_since_ms: int | None  # the first failure of the current run of failures
    failures: int  # in a row
    last_error: str


class HealthBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loops: dict[str, LoopHealth] = {}
        self._listeners: list[Callable[[bool], None]] = []

    def on_change(self, listener: Callable[[bool], None]) -> None:
        """listener(healthy) runs whenever the process's health flips, and once now."""
        with self._lock:
            self._listeners.append(listener)
            healthy = self._healthy_locked()
        listener(healthy)

    def ok(self, name: str) -> None:
        self._set(name, LoopHealth(name, True, None, 0, ""))

    def failed(self, name: str, error: BaseException, now_ms: int) -> LoopHealth:
        with self._lock:
            before = self._loops.get(name)
        since = before.failing_since_ms if before is not None and not before.healthy else now_ms
        failures = before.failures + 1 if before is not None and not before.healthy else 1
        state = LoopHealth(name, False, since, failures,
                           f"{type(error).__name__}: {error}"[:ERROR_CHARS_MAX])
        self._set(name, state)
        return state

    def _set(self, name: str, state: LoopHealth) -> None:
        with self._lock:
            was = self._healthy_locked()
            self._loops[name] = state
            now = self._healthy_locked()
            listeners = list(self._listeners) if was != now else []
        for listener in listeners:
            listener(now)

    def _healthy_locked(self) -> bool:
        return all(state.healthy for state in self._loops.values())

    @property
    def healthy(self) -> bool:
        with self._lock:
            return self._healthy_locked()

    def loops(self) -> tuple[LoopHealth, ...]:
        with self._lock:
            return tuple(sorted(self._loops.values(), key=lambda state: state.name))
