"""Whether the Mac takes work now: a pure function of the operator's terms and the host's state.

Idle lending takes work only while the user has been away for idle_minutes, the
Mac is on AC power, it is not thermally throttled, and the clock is inside a
schedule window. A dedicated seat (and the Ultra seat) always takes work.
Where the host cannot say (Linux has no HID idle time), the condition counts as met.
"""

from __future__ import annotations

from datetime import datetime

from contracts.lending import LendingMode, LendingState
from node_agent.hardware.discover import HostActivity
from node_agent.lending.config import LendingConfig
from node_agent.lending.schedule import parse_schedule, within_schedule

LEAVING_REASON = "leaving the network"


def owner_is_active(config: LendingConfig, activity: HostActivity) -> bool:
    if config.mode is not LendingMode.IDLE or activity.idle_seconds is None:
        return False
    return activity.idle_seconds < config.idle_minutes * 60


def why_not_lending(config: LendingConfig, activity: HostActivity, now: datetime) -> str | None:
    """The first of the operator's terms that forbids work now, in words; None when none does."""
    if config.mode is not LendingMode.IDLE:
        return None
    if owner_is_active(config, activity):
        assert activity.idle_seconds is not None
        return (f"the owner is using this Mac (idle {activity.idle_seconds:.0f}s of the "
                f"{config.idle_minutes * 60:.0f}s required)")
    if config.require_ac_power and activity.on_ac_power is False:
        return "on battery power; idle lending needs AC power"
    limit = activity.cpu_speed_limit_percent
    if config.pause_when_throttled and limit is not None and limit < 100:
        return f"thermally throttled (CPU speed limit {limit}%)"
    if not within_schedule(parse_schedule(config.schedule), now):
        return f"outside the lending schedule ({'; '.join(config.schedule)})"
    return None


def lending_state(config: LendingConfig, activity: HostActivity, now: datetime,
                  memory_cap_bytes: int | None, leaving: bool = False) -> LendingState:
    reason = LEAVING_REASON if leaving else why_not_lending(config, activity, now)
    return LendingState(mode=config.mode, owner_active=owner_is_active(config, activity),
                        accepting_jobs=reason is None, reason=reason or "",
                        memory_cap_bytes=memory_cap_bytes)
