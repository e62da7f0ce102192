"""The lending monitor: state changes are announced, and work is handed back after the bound."""

from __future__ import annotations

from datetime import datetime

from contracts.lending import LendingState
from node_agent.hardware.discover import HostActivity
from node_agent.lending.config import LendingConfig
from node_agent.lending.monitor import LendingMonitor

AWAY = HostActivity(3600.0, True, None)
BACK = HostActivity(5.0, True, None)


class FakeHost:
    def __init__(self) -> None:
        self.activity = AWAY
        self.now_s = 1000.0

    def read(self) -> HostActivity:
        return self.activity

    def monotonic(self) -> float:
        return self.now_s


def _monitor(host: FakeHost, seen: list[LendingState], bound_s: float = 30.0) -> LendingMonitor:
    return LendingMonitor(LendingConfig(handback_after_s=bound_s), host.read, None, seen.append,
                          host.monotonic, lambda: datetime(2026, 1, 5, 12, 0))


def test_the_owner_returning_stops_work_and_hands_back_after_the_bound() -> None:
    host, seen = FakeHost(), []
    monitor = _monitor(host, seen)
    assert monitor.state.accepting_jobs and not monitor.must_hand_back()
    host.activity = BACK
    monitor.refresh()
    assert [s.accepting_jobs for s in seen] == [False]  # announced once, at once
    assert not monitor.must_hand_back() and monitor.seconds_until_hand_back() == 30.0
    host.now_s += 29.9
    monitor.refresh()
    assert len(seen) == 1 and not monitor.must_hand_back()
    host.now_s += 0.1
    assert monitor.must_hand_back() and monitor.seconds_until_hand_back() == 0.0


def test_the_owner_leaving_again_before_the_bound_keeps_the_job() -> None:
    host, seen = FakeHost(), []
    monitor = _monitor(host, seen, bound_s=10.0)
    host.activity = BACK
    monitor.refresh()
    host.now_s += 5
    host.activity = AWAY
    monitor.refresh()
    host.now_s += 60
    assert not monitor.must_hand_back() and monitor.seconds_until_hand_back() is None
    assert [s.accepting_jobs for s in seen] == [False, True]


def test_leaving_refuses_work_with_the_same_bound() -> None:
    host, seen = FakeHost(), []
    monitor = _monitor(host, seen, bound_s=0.0)
    monitor.leave()
    assert not monitor.state.accepting_jobs and monitor.must_hand_back()
    host.activity = AWAY
    monitor.refresh()
    assert not monitor.state.accepting_jobs  # leaving is for good
