"""Feasibility filters, each with a named reason, applied in a fixed order.

The order matters only for the counts in an explanation: a candidate is counted
under the first reason that rules it out. State reasons (offline, owner active,
busy) come before the job's own reasons because they pass with time.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from coordinator.placement.candidates import MacCandidate


class FilterReason(StrEnum):
    MODEL_NOT_SERVED = "model_not_served"
    EXCLUDED = "failed_this_job"  # failed a check of this very job: its re-run goes elsewhere
    OFFLINE = "offline"
    OWNER_ACTIVE = "owner_active"
    BUSY = "busy"  # running as many jobs as its operator allows
    BELOW_MIN_SPEED = "below_min_speed"
    DOES_NOT_FIT = "does_not_fit"


FILTER_ORDER: Final = tuple(FilterReason)


def mac_state_reason(mac: MacCandidate) -> FilterReason | None:
    """Why this Mac can take no job at all right now, or None when it can."""
    return state_reason(mac.online, mac.owner_active, mac.running_jobs, mac.max_concurrent_jobs)


def state_reason(online: bool, owner_active: bool, running_jobs: int, max_concurrent_jobs: int) -> FilterReason | None:
    if not online:
        return FilterReason.OFFLINE
    if owner_active:
        return FilterReason.OWNER_ACTIVE
    if running_jobs >= max_concurrent_jobs:
        return FilterReason.BUSY
    return None


def counts_tuple(counts: dict[FilterReason, int]) -> tuple[tuple[FilterReason, int], ...]:
    """Non-zero counts in filter order, for a frozen explanation."""
    return tuple([(reason, counts[reason]) for reason in FILTER_ORDER if counts.get(reason, 0)])
