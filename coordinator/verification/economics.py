"""Why cheating does not pay, by construction: held credits as stake, and a check rate set from it. Pure.

A node's credits stay held (pending in the ledger) for the check window after each job. They
are its stake: when one of its jobs fails a check, that job's credit is voided, and so is
`stake_share` of the node's other held credits; `clawback_share` of the credits posted to it
within `clawback_horizon_s` is taken back from its operator's balance, and what the balance
cannot cover becomes a debt paid from its next credits (ledger/clawbacks.py).

The inequality. A cheat on a job of credit c saves the node a fraction f of the work, whose
cost is at most kappa * c (`work_cost_share_max`): it gains at most f * kappa * c. The job is
checked with probability r and a check detects the cheat with probability p, so it is caught
with probability r * p, and then loses at least c + s * H, where H is the node's other held
credits and s is `stake_share`. Cheating on the job pays in expectation when

    f * kappa * c  >  r * p * (c + s * H)

and never does when, for every f in (0, 1] and every p >= p_min (`detection_min`),

    r  >=  margin * kappa * c / (p_min * (c + s * H))          (the stake rate; margin > 1)
    and, where that asks for more than every job (r = 1),   p_min > kappa.

`check_rate_for_job` takes at least the stake rate for each job, from the node's stake when
the job completes, so the inequality holds job by job: for a fast node or a slow one, for a
node that cheats on every job, or once per window, or only on its largest jobs (c is the job's
own credit). A campaign of cheats is a sum of such jobs, each with negative expectation. On top,
the check rate has a floor per node per window, `checks_per_window_min` / (the node's jobs in
the last window), so a slow node is checked about that often each window whatever its trust.

What the inequality leaves out, on the node's side (so the real loss is larger): credits voided
by the audit of its unchecked jobs, the claw-back, and the trust and work it loses. What it
assumes: a check exists (a model nobody else serves and the coordinator does not hold cannot be
checked; its credits are held for `unverifiable_hold_s` instead, see outcomes.open_check), the
node cannot see which jobs are drawn, and credits released between a job and its verdict are
taken back by the claw-back (its horizon outlasts the window).

Checkers, by the same construction. A check (one prefill over the prompt and output) costs a
checker at most C = `check_cost_share` * kappa * c, for a checked job of credit c. Some checks
are planted (verification/planted.py): claims the coordinator built to be wrong, which every
honest replay rejects and which a checker cannot tell from real ones. A node asked r planted
checks per real one (r in [`planted_share_min`, `planted_per_check_max`]) is paid only for the
real ones, so the fee is set once, here, to cover its replays at the most planting:

    fee  =  fee_margin * (1 + planted_per_check_max) * C      (checker_fee_bps)

The fee is paid out of the checked job's network share and never exceeds it: check_fee caps it
at the job's network fee (ledger.policy.network_fee_floor, 15/85 = 17.6% of the operator credit
at the default earning policy), in base units. So the policy must keep
fee_margin * (1 + planted_per_check_max) * check_cost_share * kappa below that share: at the
defaults 1.25 x 2 x 0.15 x 0.4 = 15%. check_cost_share (0.15) assumes a replay, one prefill pass,
runs many times faster per token than decoding, as on a Mac's GPU (decoding reads every weight
once per token). bench/verify.py on this CPU, tiny test model: verification took 0.12 of the
generation with OpenBLAS, but 0.54 with MLX's bundled reference BLAS; a checker that slow is
not covered by the fee. Not measured on a Mac here.

A lazy checker answers "matches" without replaying, saving C. On a planted check that answer is
wrong and caught for sure, and an answer is to a planted check with probability q = r / (1 + r),
so it loses, with that probability, what it has at stake: L = S + fee, where S is every fee paid
for its checks within the claw-back horizon, taken back, plus `stake_share` of its held credits
and `clawback_share` of its posted ones, as a failed job would; and `fee` is the fee of the real
check the planted one came with, which is held as stake: a checker caught before it is paid is
never paid it (peer_checks._pay_fees), and one paid before is caught within the horizon and gives
it back. A lazy answer pays in expectation when C > q * L, so each assignment's planting rate is
raised until

    r / (1 + r)  >=  margin * C / (S + fee)                     (planted_rate)

At S = 0 (a checker with nothing at stake) r is r_max, and then, since fee = fee_margin *
(1 + r_max) * C,

    q * L  =  r_max / (1 + r_max) * fee  =  fee_margin * r_max * C  >=  margin * C

whenever fee_margin * r_max >= margin (asserted below; 1.25 x 1 >= 1.25 at the defaults). So for
every stake S >= 0 a lazy answer's expected profit over an honest one,

    C - q * (S + fee)  <=  (1 - margin) * C  <  0,

is negative: -0.25 C = -0.015 of the job's credit at S = 0, falling with S (up to the rounding of
integer fees, one base unit). A caught checker also loses its trust (quarantine_failures catches
take it out of placement for good), which is left out. bench/verify.py --policy-only evaluates
both sides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StakePolicy:
    detection_min: float = 0.5  # p_min: the policy is built for cheats caught at least this often per check
    work_cost_share_max: float = 0.4  # kappa: a job's compute costs its operator at most this share of its credit
    margin: float = 1.25  # the stake rate asks for this much more loss than a cheat can gain
    stake_share: float = 0.5  # of the node's other held credits, voided when a check fails
    clawback_share: float = 0.5  # of the credits posted to the node within the horizon, taken back
    clawback_horizon_s: int = 7 * 24 * 3600
    checks_per_window_min: float = 2.0  # expected checks per node per check window, at least
    unverifiable_hold_s: int = 3 * 24 * 3600  # credits of a model nobody can check stay held this long
    # Checkers (see above): a replay costs at most this share of the job's compute (a prefill; on CPU
    # bench/verify.py measured 0.12 with OpenBLAS, 0.54 with the reference BLAS; a Mac not measured) ...
    check_cost_share: float = 0.15
    planted_share_min: float = 0.1  # ... planted checks per real check, at least ...
    planted_per_check_max: float = 1.0  # ... and at most (a checker with little at stake): one per real check
    fee_margin: float = 1.25  # the fee covers this much more than an honest checker's replays cost

    def __post_init__(self) -> None:
        assert 0 < self.detection_min <= 1 and 0 <= self.work_cost_share_max <= 1
        # At a check rate of 1 the only stake may be the job itself: p_min * c must beat kappa * c.
        assert self.work_cost_share_max < self.detection_min, "kappa < p_min, or a first job's cheat pays"
        assert self.margin > 1 and 0 <= self.stake_share <= 1 and 0 <= self.clawback_share <= 1
        assert self.clawback_horizon_s >= 0 and self.checks_per_window_min >= 0
        assert self.unverifiable_hold_s >= 0
        assert 0 < self.check_cost_share <= 1 and self.fee_margin >= 1
        assert 0 < self.planted_share_min <= self.planted_per_check_max <= 1
        assert self.fee_margin * self.planted_per_check_max >= self.margin, \
            "fee_margin x r_max < margin: a lazy answer would pay for a checker with nothing at stake"


@dataclass(frozen=True)
class Exposure:
    """What the node has at stake when one of its jobs completes (base units, jobs)."""

    job_credit: int  # the operator's credit for this job
    held_credit: int  # the node's other credits still held
    jobs_in_window: int  # the node's other jobs completed within the last check window

    def __post_init__(self) -> None:
        assert self.job_credit >= 0 and self.held_credit >= 0 and self.jobs_in_window >= 0


def stake_rate(exposure: Exposure, policy: StakePolicy) -> float:
    """The least check rate at which a cheat on this job loses money in expectation (see above)."""
    credit = exposure.job_credit
    if credit == 0:
        return 0.0  # nothing paid, nothing to gain over honest work
    at_risk = credit + policy.stake_share * exposure.held_credit
    return min(1.0, policy.margin * policy.work_cost_share_max * credit / (policy.detection_min * at_risk))


def window_floor_rate(exposure: Exposure, policy: StakePolicy) -> float:
    """Enough of the node's jobs checked that it expects checks_per_window_min checks a window."""
    return min(1.0, policy.checks_per_window_min / (exposure.jobs_in_window + 1))


def check_rate_for_job(trust_rate: float, exposure: Exposure, policy: StakePolicy) -> float:
    """The chance this job is checked: its node's trust rate, raised to the window floor and
    the stake rate."""
    assert 0 <= trust_rate <= 1
    return max(trust_rate, window_floor_rate(exposure, policy), stake_rate(exposure, policy))


def forfeit(held_credit: int, policy: StakePolicy) -> int:
    """Base units of the node's other held credits voided when one of its checks fails."""
    return math.ceil(held_credit * policy.stake_share)


def clawback(posted_credit: int, policy: StakePolicy) -> int:
    """Base units taken back of what was posted to the node within the claw-back horizon."""
    return math.ceil(posted_credit * policy.clawback_share)


# --- checkers: the fee, and the planted checks that make laziness lose money ----------------

BASIS_POINTS = 10_000


def checker_fee_bps(policy: StakePolicy) -> int:
    """A checker's fee, in basis points of the checked job's operator credit, before the cap at the
    job's network fee (see above)."""
    share = (policy.fee_margin * (1 + policy.planted_per_check_max) * policy.check_cost_share
             * policy.work_cost_share_max)
    return min(BASIS_POINTS, math.ceil(share * BASIS_POINTS - 1e-9))  # 1e-9: float dust, not a unit


def replay_cost(job_credit: int, policy: StakePolicy) -> float:
    """C: base units a checker's replay of a job of this credit costs it at most (what laziness saves)."""
    return policy.check_cost_share * policy.work_cost_share_max * job_credit


def own_fee(job_credit: int, policy: StakePolicy) -> int:
    """The fee of a real check of a job of this credit, before the network-fee cap (peers.check_fee):
    what the checker holds at stake on that check itself."""
    return job_credit * checker_fee_bps(policy) // BASIS_POINTS


def planted_rate(job_credit: int, at_stake: int, policy: StakePolicy) -> float:
    """Planted checks to send with a real check of this credit, per real check, for a checker with
    `at_stake` base units (S) to lose when caught besides the check's own fee: the least r with
    r / (1 + r) >= margin * C / (S + fee)."""
    assert job_credit >= 0 and at_stake >= 0
    loss = at_stake + own_fee(job_credit, policy)
    needed = policy.margin * replay_cost(job_credit, policy) / loss if loss else math.inf
    rate = needed / (1 - needed) if needed < 1 else math.inf
    return min(policy.planted_per_check_max, max(policy.planted_share_min, rate))


@dataclass(frozen=True)
class CheckerProfit:
    planted_rate: float  # r: planted checks per real one
    honest: float  # base units an honest checker earns per real check, over its replays' cost
    lazy_gain: float  # C: what one lazy answer saves
    lazy_caught: float  # q = r / (1 + r): the chance that answer was to a planted check
    lazy_loss: float  # L = S + fee: what the checker loses when caught (its stake and the check's own fee)
    lazy: float  # expected profit of one lazy answer, over an honest one: C - q * L


def checker_profit(job_credit: int, at_stake: int, policy: StakePolicy) -> CheckerProfit:
    """Both sides of the checker's choice, for a check of a job of this credit (see above)."""
    rate = planted_rate(job_credit, at_stake, policy)
    cost = replay_cost(job_credit, policy)
    fee = own_fee(job_credit, policy)
    caught = rate / (1 + rate)
    loss = at_stake + fee
    return CheckerProfit(rate, fee - (1 + rate) * cost, cost, caught, loss, cost - caught * loss)


def checker_at_stake(fees_in_horizon: int, held_credit: int, posted_in_horizon: int, policy: StakePolicy) -> int:
    """S: what a checker caught answering a planted check loses besides the fee of the check in hand
    (its fees of the horizon, its stake, a claw-back)."""
    return fees_in_horizon + forfeit(held_credit, policy) + clawback(posted_in_horizon, policy)


# --- the expected profit of cheating, for the benchmark and the property tests ------------

@dataclass(frozen=True)
class Cheater:
    """A node's pace and habits, in credits of its average job."""

    jobs_per_window: float  # its pace: jobs completed per check window
    trust_rate: float  # its trust policy rate (rate_min once trust is built, the worst case)
    cheated_job_size: float = 1.0  # the cheated job's credit over the node's average credit
    cheats_per_window: float | None = None  # None: every job; 1: once per window
    credit: int = 1_000_000  # base units of an average job's credit

    def __post_init__(self) -> None:
        assert self.jobs_per_window >= 0 and 0 <= self.trust_rate <= 1 and self.cheated_job_size > 0
        assert self.cheats_per_window is None or self.cheats_per_window > 0


@dataclass(frozen=True)
class Profit:
    check_rate: float  # the cheated job's
    caught: float  # chance a cheated job is caught: check rate x detection
    gain: float  # base units a cheated job saves at most (work saved x its cost)
    loss: float  # base units lost when caught: the job's credit and the stake voided
    per_cheat: float  # expected profit of one cheated job: gain - caught x loss
    per_window: float  # per_cheat x the cheated jobs of a window
    until_caught: float  # expected profit of cheating until caught: per_cheat / caught


def expected_profit(work_saved: float, detection: float, policy: StakePolicy, cheater: Cheater) -> Profit:
    """What a cheat that saves `work_saved` (f) of a job's work and is detected with probability
    `detection` (p) per check earns the cheater, over honest work, in expectation.

    Its other credits held are those of its jobs in the last window (all held for the window),
    counted at the stake a check failure voids; the claw-back and audits are left out.
    """
    assert 0 < work_saved <= 1 and 0 <= detection <= 1
    credit = round(cheater.credit * cheater.cheated_job_size)
    others = max(0.0, cheater.jobs_per_window - 1)
    held = round(others * cheater.credit)
    exposure = Exposure(credit, held, math.floor(others))
    rate = check_rate_for_job(cheater.trust_rate, exposure, policy)
    caught = rate * detection
    gain = work_saved * policy.work_cost_share_max * credit
    loss = credit + forfeit(held, policy)
    per_cheat = gain - caught * loss
    cheats = cheater.jobs_per_window if cheater.cheats_per_window is None else min(
        cheater.cheats_per_window, cheater.jobs_per_window)
    return Profit(rate, caught, gain, loss, per_cheat, per_cheat * cheats,
                  per_cheat / caught if caught > 0 else math.inf)


def choose_forfeits(held: list[tuple[str, int]], amount: int) -> list[str]:
    """Which held credits (job id, base units; newest first) to void so at least `amount` goes:
    whole credits, newest first (a held credit is voided whole, never split)."""
    chosen, total = [], 0
    for job_id, credit in held:
        if total >= amount:
            break
        chosen.append(job_id)
        total += credit
    return chosen
