"""The lending policy: idle time, AC power, heat, schedule; dedicated seats always lend."""

from __future__ import annotations

from datetime import datetime

from hypothesis import given
from hypothesis import strategies as st

from contracts.lending import LendingMode
from node_agent.hardware.discover import HostActivity
from node_agent.lending.config import LendingConfig
from node_agent.lending.policy import LEAVING_REASON, lending_state

NOON = datetime(2026, 1, 5, 12, 0)  # a Monday
AWAY = HostActivity(idle_seconds=3600.0, on_ac_power=True, cpu_speed_limit_percent=None)
IDLE = LendingConfig(mode=LendingMode.IDLE, idle_minutes=10)


def test_idle_lending_takes_work_only_when_every_term_holds() -> None:
    assert lending_state(IDLE, AWAY, NOON, None).accepting_jobs
    back = lending_state(IDLE, HostActivity(30.0, True, None), NOON, None)
    assert back.owner_active and not back.accepting_jobs and "using this Mac" in back.reason
    battery = lending_state(IDLE, HostActivity(3600.0, False, None), NOON, None)
    assert not battery.accepting_jobs and "battery" in battery.reason and not battery.owner_active
    hot = lending_state(IDLE, HostActivity(3600.0, True, 70), NOON, None)
    assert not hot.accepting_jobs and "70%" in hot.reason
    nights = LendingConfig(schedule=("Mon-Fri 22:00-07:00",))
    assert "outside the lending schedule" in lending_state(nights, AWAY, NOON, None).reason


def test_operators_may_waive_power_and_heat() -> None:
    relaxed = LendingConfig(require_ac_power=False, pause_when_throttled=False)
    assert lending_state(relaxed, HostActivity(3600.0, False, 60), NOON, None).accepting_jobs


def test_what_the_host_cannot_say_counts_as_met() -> None:
    linux = HostActivity(idle_seconds=None, on_ac_power=None, cpu_speed_limit_percent=None)
    state = lending_state(IDLE, linux, NOON, 8 << 30)
    assert state.accepting_jobs and not state.owner_active and state.memory_cap_bytes == 8 << 30


def test_leaving_stops_every_mode() -> None:
    for mode in LendingMode:
        state = lending_state(LendingConfig(mode=mode), AWAY, NOON, None, leaving=True)
        assert not state.accepting_jobs and state.reason == LEAVING_REASON


activities = st.builds(HostActivity, st.none() | st.floats(0, 10**6),
                       st.none() | st.booleans(), st.none() | st.integers(1, 100))


@given(activities, st.sampled_from(list(LendingMode)), st.floats(0.5, 120))
def test_an_owner_at_the_keyboard_never_gets_work_and_seats_always_do(
        activity: HostActivity, mode: LendingMode, idle_minutes: float) -> None:
    config = LendingConfig(mode=mode, idle_minutes=idle_minutes)
    state = lending_state(config, activity, NOON, None)
    if mode is LendingMode.IDLE and activity.idle_seconds is not None \
            and activity.idle_seconds < idle_minutes * 60:
        assert state.owner_active and not state.accepting_jobs
    if mode is not LendingMode.IDLE:
        assert state.accepting_jobs and not state.owner_active and state.reason == ""
    assert state.accepting_jobs == (state.reason == "")
