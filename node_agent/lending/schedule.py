"""Lending schedule windows: "Mon-Fri 22:00-07:00", "Sat,Sun 00:00-24:00", "daily 09:00-17:00".

A window that ends before it starts runs past midnight and belongs to the day it
starts on: "Fri 22:00-07:00" covers Friday night into Saturday morning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
WINDOWS_MAX = 32
_WINDOW = re.compile(r"\s*(?P<days>[A-Za-z,\-]+)\s+(?P<start>\d{1,2}:\d{2})\s*-\s*(?P<end>\d{1,2}:\d{2})\s*")
MINUTES_PER_DAY = 24 * 60


class ScheduleError(ValueError):
    """A schedule window the operator wrote cannot be read; the message says how to write it."""


@dataclass(frozen=True)
class Window:
    days: frozenset[int]  # 0 = Monday, as datetime.weekday()
    start_minute: int  # minutes after midnight
    end_minute: int  # 1..1440; at or before start_minute means it runs past midnight

    def covers(self, moment: datetime) -> bool:
        minute = moment.hour * 60 + moment.minute
        if self.start_minute < self.end_minute:
            return moment.weekday() in self.days and self.start_minute <= minute < self.end_minute
        if moment.weekday() in self.days and minute >= self.start_minute:
            return True
        yesterday = (moment - timedelta(days=1)).weekday()
        return yesterday in self.days and minute < self.end_minute


def _minute(text: str, what: str, *, allow_24: bool) -> int:
    hours, minutes = (int(part) for part in text.split(":"))
    if minutes >= 60 or hours > 24 or (hours == 24 and (minutes or not allow_24)):
        raise ScheduleError(f"{what} time {text!r} is not a time of day (00:00 to 23:59"
                            f"{', or 24:00 as an end' if allow_24 else ''})")
    return hours * 60 + minutes


def _days(text: str) -> frozenset[int]:
    text = text.lower()
    if text in ("daily", "every", "all"):
        return frozenset(range(7))
    days: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first[:3] not in DAY_NAMES or (last and last[:3] not in DAY_NAMES):
            raise ScheduleError(f"day {part!r} is not Mon..Sun, a range like Mon-Fri, or daily")
        start = DAY_NAMES.index(first[:3])
        end = DAY_NAMES.index(last[:3]) if last else start
        day = start
        while True:  # a range may wrap: Sat-Mon is Saturday, Sunday, Monday
            days.add(day)
            if day == end:
                break
            day = (day + 1) % 7
    return frozenset(days)


def parse_window(text: str) -> Window:
    match = _WINDOW.fullmatch(text)
    if match is None:
        raise ScheduleError(f"schedule window {text!r} is not '<days> HH:MM-HH:MM', "
                            "e.g. 'Mon-Fri 22:00-07:00' or 'daily 09:00-17:00'")
    start = _minute(match["start"], "start", allow_24=False)
    end = _minute(match["end"], "end", allow_24=True)
    if start == end:
        raise ScheduleError(f"schedule window {text!r} is empty: start and end are equal")
    return Window(_days(match["days"]), start, end)


def parse_schedule(windows: tuple[str, ...]) -> tuple[Window, ...]:
    if len(windows) > WINDOWS_MAX:
        raise ScheduleError(f"a schedule has at most {WINDOWS_MAX} windows")
    return tuple(parse_window(text) for text in windows)


def within_schedule(windows: tuple[Window, ...], moment: datetime) -> bool:
    """No windows means any time."""
    return not windows or any(window.covers(moment) for window in windows)
