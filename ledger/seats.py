"""Dedicated Ultra seats, pure: availability from heartbeat times, and what a seat earns in an epoch.

A signed heartbeat received at t proves the node was online over [t, t + heartbeat_credit_ms);
availability is the share of the epoch those intervals cover, in basis points. The
coordinator gathers the times (coordinator/money/epochs.py); the ledger only sees the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ledger.policy import BPS_ONE, EarningPolicy
from ledger.units import format_mlx

SECONDS_PER_HOUR = 3_600
HEARTBEATS_PER_EPOCH_MAX = 1_000_000  # one a second for an 11-day epoch
JOBS_PER_SEAT_MAX = 1_000_000


def availability_bps(times_ms: Sequence[int], start_ms: int, end_ms: int, heartbeat_credit_ms: int) -> int:
    """The share of [start_ms, end_ms) covered by [t, t + heartbeat_credit_ms) for each time, in bps."""
    assert 0 <= start_ms < end_ms and heartbeat_credit_ms > 0
    assert len(times_ms) <= HEARTBEATS_PER_EPOCH_MAX, "too many heartbeats for one epoch"
    covered_ms = 0
    reached_ms = start_ms  # everything before this is already counted
    for time_ms in sorted(times_ms):
        begin = max(time_ms, reached_ms)
        end = min(time_ms + heartbeat_credit_ms, end_ms)
        if end > begin:
            covered_ms += end - begin
            reached_ms = end
    return covered_ms * BPS_ONE // (end_ms - start_ms)


@dataclass(frozen=True)
class SeatInput:
    """One dedicated Ultra seat in an epoch, as the coordinator saw it."""

    node_id: str
    operator_id: str
    availability_bps: int
    job_ids: tuple[str, ...]  # jobs the seat ran whose credit may have posted in the epoch
    verified_ultra: bool = True  # False when the chip claim failed its benchmark check

    def __post_init__(self) -> None:
        assert type(self.availability_bps) is int and 0 <= self.availability_bps <= BPS_ONE
        assert len(self.job_ids) <= JOBS_PER_SEAT_MAX


@dataclass(frozen=True)
class SeatOutcome:
    node_id: str
    operator_id: str
    availability_bps: int
    qualified: bool
    reason: str  # why it earned, or why not
    availability_reward: int
    job_bonus: int
    bonus_job_count: int


def _percent(bps: int) -> str:
    return f"{bps // 100}.{bps % 100:02d}%"


def seat_outcome(
    seat: SeatInput, job_credits: Sequence[int], epoch_length_s: int, policy: EarningPolicy
) -> SeatOutcome:
    """What the seat earns this epoch from the bonus pool; job_credits are its credits posted in the epoch."""
    assert epoch_length_s > 0 and all(type(c) is int and c > 0 for c in job_credits)
    threshold = policy.availability_threshold_bps
    if not seat.verified_ultra:
        reason = "no bonus: the chip did not verify as an Ultra"
        return SeatOutcome(seat.node_id, seat.operator_id, seat.availability_bps, False, reason, 0, 0, 0)
    if seat.availability_bps < threshold:
        reason = (f"no bonus: availability {_percent(seat.availability_bps)} is below the "
                  f"{_percent(threshold)} threshold (from signed heartbeats)")
        return SeatOutcome(seat.node_id, seat.operator_id, seat.availability_bps, False, reason, 0, 0, 0)
    reward = (policy.availability_reward_per_seat_hour * epoch_length_s * seat.availability_bps
              // (SECONDS_PER_HOUR * BPS_ONE))
    bonus = sum(credit * policy.dedicated_ultra_bonus_bps // BPS_ONE for credit in job_credits)
    reason = (f"qualified: availability {_percent(seat.availability_bps)} >= {_percent(threshold)}; "
              f"reward {format_mlx(reward)}, bonus {format_mlx(bonus)} on {len(job_credits)} jobs")
    return SeatOutcome(seat.node_id, seat.operator_id, seat.availability_bps, True, reason, reward, bonus,
                       len(job_credits))
