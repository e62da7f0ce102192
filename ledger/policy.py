"""The earning policy: what a job costs its consumer and how the charge is split.

Policy version 2026-12.2. Every transfer that applies it records the version, so an
operator can recompute each payout from the job's token counts and this module.

Pricing, all in integer base units (see ledger.units):
- A model's size class comes from its parameter count: <=3B, <=14B, <=70B, <=400B, larger.
- Each class has a price per million prompt tokens and per million generated tokens.
- consumer_charge = floor((prompt_tokens * prompt_price + completion_tokens *
  completion_price) / 1_000_000). Rounding down means a consumer never pays for a
  fraction of a base unit; the loss is below one base unit per job.
- operator_credit = floor(consumer_charge * operator_share_bps / 10_000).
- network_fee = consumer_charge - operator_credit, so the network takes the rounding
  dust and consumer_charge == operator_credit + network_fee exactly.
- A dedicated Ultra seat (an Ultra Mac lent full time, its chip verified) earns more,
  paid at each epoch's close from the bonus pool and only if its availability over the
  epoch, proven by signed heartbeats, reached availability_threshold_bps:
  - a job bonus: floor(credit * dedicated_ultra_bonus_bps / 10_000) for each of its job
    credits posted in the epoch (the operator's 85% share times 1.10);
  - an availability reward: floor(availability_reward_per_seat_hour * epoch_length_s *
    availability_bps / (3_600 * 10_000)), i.e. per hour it was available.
  A seat below the threshold gets neither for that epoch, and its statement says why.
  Jobs are always priced at the base share when they complete; price_job's
  dedicated_ultra_seat flag only quotes the boosted share (taken from the fee).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ledger.units import AMOUNT_MAX, parse_mlx

POLICY_VERSION = "2026-12.2"

BPS_ONE = 10_000  # basis points in 100%
TOKENS_PER_PRICE_UNIT = 1_000_000  # prices are quoted per million tokens
TOKENS_PER_JOB_MAX = 10_000_000  # far above any context window; bounds the arithmetic
PARAMETER_COUNT_MAX = 100 * 10**12  # 100 trillion parameters


class SizeClass(StrEnum):
    UP_TO_3B = "up_to_3b"
    UP_TO_14B = "up_to_14b"
    UP_TO_70B = "up_to_70b"
    UP_TO_400B = "up_to_400b"
    OVER_400B = "over_400b"


@dataclass(frozen=True)
class ClassPrice:
    size_class: SizeClass
    parameter_count_max: int | None  # None: no upper bound (the last class)
    prompt_price_per_million_tokens: int  # base units
    completion_price_per_million_tokens: int  # base units

    def __post_init__(self) -> None:
        for price in (self.prompt_price_per_million_tokens, self.completion_price_per_million_tokens):
            assert type(price) is int and 0 <= price <= AMOUNT_MAX // (2 * TOKENS_PER_JOB_MAX)


@dataclass(frozen=True)
class JobPrice:
    consumer_charge: int  # base units
    operator_credit: int  # base units
    network_fee: int  # base units
    policy_version: str

    def __post_init__(self) -> None:
        for amount in (self.consumer_charge, self.operator_credit, self.network_fee):
            assert type(amount) is int and 0 <= amount <= AMOUNT_MAX, "amounts are non-negative ints"
        assert self.consumer_charge == self.operator_credit + self.network_fee, "charge must split exactly"
        assert self.policy_version, "every price names the policy that made it"


@dataclass(frozen=True)
class EarningPolicy:
    version: str
    class_prices: tuple[ClassPrice, ...]  # ascending by parameter_count_max
    operator_share_bps: int
    dedicated_ultra_bonus_bps: int  # multiplier on the share: 1_000 means share * 1.10
    availability_threshold_bps: int = 9_500  # an Ultra seat must be online 95% of the epoch
    availability_reward_per_seat_hour: int = 0  # base units from the bonus pool

    def __post_init__(self) -> None:
        assert self.version and self.class_prices
        assert 0 <= self.operator_share_bps <= BPS_ONE
        assert 0 <= self.dedicated_ultra_bonus_bps <= BPS_ONE
        assert 0 <= self.availability_threshold_bps <= BPS_ONE
        assert type(self.availability_reward_per_seat_hour) is int
        assert 0 <= self.availability_reward_per_seat_hour <= AMOUNT_MAX // (24 * 3600)
        bounds = [price.parameter_count_max for price in self.class_prices]
        assert bounds[-1] is None and None not in bounds[:-1], "only the last class is unbounded"
        assert bounds[:-1] == sorted(set(bounds[:-1])), "class bounds ascend strictly"

    def operator_share_bps_for(self, dedicated_ultra_seat: bool) -> int:
        if not dedicated_ultra_seat:
            return self.operator_share_bps
        boosted = self.operator_share_bps * (BPS_ONE + self.dedicated_ultra_bonus_bps) // BPS_ONE
        return min(BPS_ONE, boosted)


_BILLION = 10**9

DEFAULT_POLICY = EarningPolicy(
    version=POLICY_VERSION,
    class_prices=(
        ClassPrice(SizeClass.UP_TO_3B, 3 * _BILLION, parse_mlx("0.02"), parse_mlx("0.06")),
        ClassPrice(SizeClass.UP_TO_14B, 14 * _BILLION, parse_mlx("0.08"), parse_mlx("0.24")),
        ClassPrice(SizeClass.UP_TO_70B, 70 * _BILLION, parse_mlx("0.40"), parse_mlx("1.20")),
        ClassPrice(SizeClass.UP_TO_400B, 400 * _BILLION, parse_mlx("1.50"), parse_mlx("4.50")),
        ClassPrice(SizeClass.OVER_400B, None, parse_mlx("3.00"), parse_mlx("9.00")),
    ),
    operator_share_bps=8_500,  # operators keep 85%; the network fee is the rest
    dedicated_ultra_bonus_bps=1_000,  # dedicated Ultra seats keep 85% * 1.10 = 93.5%
    availability_threshold_bps=9_500,
    availability_reward_per_seat_hour=parse_mlx("0.5"),
)

POLICIES = {DEFAULT_POLICY.version: DEFAULT_POLICY}  # every version ever used, for audits


def policy_for_version(version: str) -> EarningPolicy | None:
    return POLICIES.get(version)


def class_price(parameter_count: int, policy: EarningPolicy = DEFAULT_POLICY) -> ClassPrice:
    assert type(parameter_count) is int and 0 < parameter_count <= PARAMETER_COUNT_MAX
    for price in policy.class_prices:
        if price.parameter_count_max is None or parameter_count <= price.parameter_count_max:
            return price
    raise AssertionError("the last class is unbounded, so a class always matches")


def size_class(parameter_count: int, policy: EarningPolicy = DEFAULT_POLICY) -> SizeClass:
    return class_price(parameter_count, policy).size_class


def price_job(
    parameter_count: int,
    prompt_tokens: int,
    completion_tokens: int,
    policy: EarningPolicy = DEFAULT_POLICY,
    *,
    dedicated_ultra_seat: bool = False,
) -> JobPrice:
    """Price one finished job; see the module docstring for the rounding rules."""
    for tokens in (prompt_tokens, completion_tokens):
        assert type(tokens) is int and 0 <= tokens <= TOKENS_PER_JOB_MAX, f"token count out of range: {tokens}"
    price = class_price(parameter_count, policy)
    scaled_charge = (
        prompt_tokens * price.prompt_price_per_million_tokens
        + completion_tokens * price.completion_price_per_million_tokens
    )
    consumer_charge = scaled_charge // TOKENS_PER_PRICE_UNIT
    share_bps = policy.operator_share_bps_for(dedicated_ultra_seat)
    operator_credit = consumer_charge * share_bps // BPS_ONE
    return JobPrice(
        consumer_charge=consumer_charge,
        operator_credit=operator_credit,
        network_fee=consumer_charge - operator_credit,
        policy_version=policy.version,
    )


def network_fee_floor(operator_credit: int, policy: EarningPolicy = DEFAULT_POLICY) -> int:
    """The least network fee of a job priced at the base share whose operator credit is this.

    operator_credit = floor(charge * share / BPS_ONE) <= charge * share / BPS_ONE, so
    charge >= operator_credit * BPS_ONE / share and network_fee = charge - operator_credit >=
    operator_credit * (BPS_ONE - share) / share. What is paid out of a job's network share (a
    peer's check fee) is capped here, so it never exceeds the fee the job paid."""
    assert type(operator_credit) is int and operator_credit >= 0
    share = policy.operator_share_bps
    if share == 0:
        return 0  # no job earns a credit; nothing is paid against it
    return operator_credit * (BPS_ONE - share) // share


def max_job_charge(
    parameter_count: int,
    prompt_tokens: int,
    max_tokens: int,
    policy: EarningPolicy = DEFAULT_POLICY,
) -> int:
    """The most a job can cost, for its reservation: the charge if all max_tokens are generated.

    The charge grows with completion tokens and ignores the seat bonus, so no
    finished job with completion_tokens <= max_tokens costs more than this.
    """
    return price_job(parameter_count, prompt_tokens, max_tokens, policy).consumer_charge
