"""How much of a node's work is checked, and when it is no longer trusted. Pure.

A node is either honest or a cheater that cheats on at least `cheat_share` of its
jobs (the Bayesian "spoofer probability" of Inference.net). Each check updates the
odds that it cheats:

    passed: odds *= (1 - cheat_share) / (1 - false_failure_rate)
    failed: odds *= cheat_share / false_failure_rate

A node may turn after a long honest run, so once it has failed, only the checks it
passed since its last failure count in its favour.

The share of its jobs that gets checked, `check_rate`, is 1 for a new node's first
`new_node_checks` jobs, then follows that probability (times `rate_per_cheat_chance`)
between `rate_min` and 1: it falls with honest history and jumps to 1 after any
failure. `quarantine_failures` failed checks take a node out of placement for good.
Each job's own rate is then raised to what its node's stake calls for (economics.py, where
the inequality that makes cheating lose money is written out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from coordinator.verification.economics import StakePolicy


@dataclass(frozen=True)
class TrustPolicy:
    new_node_checks: int = 10  # a new node's first jobs are all checked
    prior_cheat_chance: float = 0.1  # for a node nobody knows yet
    cheat_share: float = 0.2  # a cheater cheats on at least this share of its jobs
    false_failure_rate: float = 1e-4  # an honest job failing a check (none seen in calibration)
    rate_per_cheat_chance: float = 10.0  # check rate = this x chance the node cheats ...
    rate_min: float = 0.02  # ... but never below this share (the network's steady state)
    quarantine_failures: int = 2  # failed checks that take a node out of placement
    check_window_s: int = 3600  # unchecked credits stay held (slashable) this long
    stake: StakePolicy = field(default_factory=StakePolicy)  # stake, claw-back, per-job and window floors

    def __post_init__(self) -> None:
        assert self.new_node_checks >= 0 and self.quarantine_failures >= 1
        assert 0 < self.prior_cheat_chance < 1 and 0 < self.cheat_share < 1
        assert 0 < self.false_failure_rate < self.cheat_share
        assert 0 < self.rate_min <= 1 and self.rate_per_cheat_chance > 0
        assert 0 <= self.check_window_s


@dataclass(frozen=True)
class TrustRecord:
    """A node's checked history."""

    checks_passed: int = 0
    checks_failed: int = 0
    passed_since_failure: int | None = None  # None: never failed, so all of checks_passed

    def __post_init__(self) -> None:
        assert self.checks_passed >= 0 and self.checks_failed >= 0
        assert self.passed_since_failure is None or 0 <= self.passed_since_failure <= self.checks_passed

    @property
    def passes_that_count(self) -> int:
        return self.checks_passed if self.passed_since_failure is None else self.passed_since_failure

    def after(self, passed: bool) -> TrustRecord:
        if passed:
            since = None if self.passed_since_failure is None else self.passed_since_failure + 1
            return TrustRecord(self.checks_passed + 1, self.checks_failed, since)
        return TrustRecord(self.checks_passed, self.checks_failed + 1, 0)


def cheat_chance(record: TrustRecord, policy: TrustPolicy) -> float:
    """Posterior probability that the node is a cheater, given its checks."""
    log_odds = (math.log(policy.prior_cheat_chance / (1 - policy.prior_cheat_chance))
                + record.passes_that_count * math.log((1 - policy.cheat_share) / (1 - policy.false_failure_rate))
                + record.checks_failed * math.log(policy.cheat_share / policy.false_failure_rate))
    if log_odds > 700:
        return 1.0
    odds = math.exp(log_odds)
    return odds / (1 + odds)


def check_rate(record: TrustRecord, policy: TrustPolicy) -> float:
    """The share of the node's next jobs to check by replay."""
    if record.checks_passed + record.checks_failed < policy.new_node_checks:
        return 1.0
    return min(1.0, max(policy.rate_min, policy.rate_per_cheat_chance * cheat_chance(record, policy)))


def reputation(record: TrustRecord, policy: TrustPolicy) -> float:
    """0..1 for placement: the chance the node is honest."""
    return 1.0 - cheat_chance(record, policy)


def is_quarantined(record: TrustRecord, policy: TrustPolicy) -> bool:
    return record.checks_failed >= policy.quarantine_failures


def should_check(rate: float, draw: float) -> bool:
    """draw is uniform in [0, 1), drawn by the coordinator where the node cannot see it."""
    assert 0.0 <= draw < 1.0 and 0.0 <= rate <= 1.0
    return draw < rate
