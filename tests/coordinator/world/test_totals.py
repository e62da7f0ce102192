"""Network totals and their history, pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.world.totals import (
    HISTORY_SAMPLES_MAX, Candidate, Totals, TotalsHistory, largest_candidate, params_at_4bit,
)

GIB = 1 << 30


def _totals(at_ms: int = 1_000, **changes: object) -> Totals:
    values: dict[str, object] = dict(
        at_ms=at_ms, macs_total=3, macs_online=2, macs_busy=1, pods_online=0,
        memory_lendable_bytes=100 * GIB, largest=Candidate("Studio", "mac", 48 * GIB),
        jobs_last_minute=30, tokens_last_minute=6_000, operator_paid_base_units=2**60,
        operator_held_base_units=5)
    values.update(changes)
    return Totals(**values)  # type: ignore[arg-type]


@given(st.integers(0, 2**50), st.integers(0, 2**50))
def test_more_free_memory_never_fits_a_smaller_model(a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert params_at_4bit(low) <= params_at_4bit(high)
    assert params_at_4bit(high) * 4.5 / 8 <= high  # the weights fit in what was free


def test_a_512_gb_studio_fits_a_model_of_about_600_billion_parameters() -> None:
    # 384 GiB of GPU budget (75% of 512), less 15% reserve, at 4.5 bits per weight.
    assert 600e9 < params_at_4bit(384 * GIB) < 650e9


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.integers(0, 100)), min_size=1, max_size=8))
def test_the_largest_candidate_is_the_freest_and_does_not_depend_on_order(pairs: list[tuple[str, int]]) -> None:
    candidates = [Candidate(label, "mac", free) for label, free in pairs]
    best = largest_candidate(candidates)
    assert best is not None and best.free_bytes == max(free for _, free in pairs)
    assert largest_candidate(reversed(candidates)) == best
    assert largest_candidate([]) is None


def test_json_gives_rates_and_exact_money_as_text() -> None:
    data = _totals().to_json()
    assert data["jobs_per_minute"] == 30 and data["tokens_per_s"] == 100.0
    assert data["mlx_paid_base_units"] == str(2**60)  # beyond 2**53: exact only as text
    assert data["mlx_held"] == "0.000000005 MLX"
    assert data["largest_model"] == {"where": "Studio", "kind": "mac", "free_bytes": 48 * GIB,
                                     "params_4bit": params_at_4bit(48 * GIB)}
    assert _totals(largest=None).to_json()["largest_model"] is None


def test_history_keeps_one_sample_per_interval_and_a_bounded_number() -> None:
    history = TotalsHistory(interval_ms=1_000, samples_max=3)
    assert history.offer(_totals(0))
    assert not history.offer(_totals(999))
    for at in (1_000, 2_000, 3_000):
        assert history.offer(_totals(at, macs_online=at // 1000))
    data = history.to_json()
    assert data["at_ms"] == [1_000, 2_000, 3_000]
    assert data["series"]["macs_online"] == [1, 2, 3]
    assert data["series"]["mlx_paid_base_units"] == [str(2**60)] * 3
    assert TotalsHistory().to_json()["interval_ms"] == 10_000 and HISTORY_SAMPLES_MAX == 360
