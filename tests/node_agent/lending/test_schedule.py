"""Schedule windows: days, ranges that wrap the week, windows past midnight, and clear errors."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node_agent.lending.schedule import ScheduleError, parse_schedule, parse_window, within_schedule

FRIDAY_23H = datetime(2026, 1, 2, 23, 0)  # 2026-01-02 is a Friday
SATURDAY_06H = datetime(2026, 1, 3, 6, 59)
SATURDAY_07H = datetime(2026, 1, 3, 7, 0)
MONDAY_06H = datetime(2026, 1, 5, 6, 0)


def test_a_night_window_belongs_to_the_day_it_starts() -> None:
    weeknights = parse_schedule(("Mon-Fri 22:00-07:00",))
    assert within_schedule(weeknights, FRIDAY_23H)
    assert within_schedule(weeknights, SATURDAY_06H)  # Friday night into Saturday morning
    assert not within_schedule(weeknights, SATURDAY_07H)
    assert not within_schedule(weeknights, MONDAY_06H)  # Sunday night is not a weeknight


def test_day_lists_wrapping_ranges_and_whole_days() -> None:
    assert parse_window("Sat-Mon 00:00-24:00").days == frozenset({5, 6, 0})
    assert parse_window("sat,sun 10:00-12:00").days == frozenset({5, 6})
    assert parse_window("daily 09:00-17:00").days == frozenset(range(7))
    assert within_schedule(parse_schedule(("Sat-Sun 00:00-24:00",)), SATURDAY_07H)


def test_no_windows_means_any_time() -> None:
    assert within_schedule((), MONDAY_06H)


@pytest.mark.parametrize("text, fix", [
    ("weekdays 22:00-07:00", "Mon..Sun"),
    ("Mon-Fri 25:00-07:00", "time of day"),
    ("Mon-Fri 22:00", "'<days> HH:MM-HH:MM'"),
    ("Mon 10:00-10:00", "empty"),
    ("Mon 24:00-10:00", "time of day"),
])
def test_bad_windows_say_how_to_write_them(text: str, fix: str) -> None:
    with pytest.raises(ScheduleError, match=fix):
        parse_window(text)


@given(st.integers(0, 6), st.integers(0, 23), st.integers(0, 23), st.integers(0, 7 * 24 * 60 - 1))
def test_a_window_covers_exactly_its_minutes(day: int, start_hour: int, end_hour: int,
                                              minute_of_week: int) -> None:
    """Against a brute-force reference: the minutes from the start on `day` until the end."""
    if start_hour == end_hour:
        return
    window = parse_window(f"{['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'][day]} "
                          f"{start_hour:02d}:00-{end_hour:02d}:00")
    length = ((end_hour - start_hour) % 24) * 60
    start = day * 24 * 60 + start_hour * 60
    expected = (minute_of_week - start) % (7 * 24 * 60) < length
    moment = datetime(2026, 1, 5) + timedelta(minutes=minute_of_week)  # 2026-01-05 is a Monday
    assert window.covers(moment) == expected
