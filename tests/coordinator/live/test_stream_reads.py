"""A stream's wake-up reads check jobs and challenges only when their topics moved (with a relay),
and everything at its first read, without a relay, and once per full-read interval."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.live.stream_reads import KindVersions, LastReads, Reads, after_reads, reads_due

FULL_MS = 60_000
START = KindVersions(3, 7)


def test_the_first_read_reads_everything_even_with_a_relay() -> None:
    assert reads_due(START, None, True, 0, FULL_MS) == Reads(True, True)


def test_without_a_relay_every_wake_up_reads_everything() -> None:
    last = LastReads(START, 0)
    assert reads_due(START, last, False, 1, FULL_MS) == Reads(True, True)


def test_with_a_relay_a_job_wake_up_reads_neither_kind() -> None:
    last = LastReads(START, 0)
    assert reads_due(START, last, True, 1, FULL_MS) == Reads(False, False)


def test_each_kind_is_read_when_its_topic_moved() -> None:
    last = LastReads(START, 0)
    assert reads_due(KindVersions(4, 7), last, True, 1, FULL_MS) == Reads(True, False)
    assert reads_due(KindVersions(3, 8), last, True, 1, FULL_MS) == Reads(False, True)


def test_everything_is_read_again_once_the_full_read_interval_has_passed() -> None:
    last = LastReads(START, 1_000)
    assert reads_due(START, last, True, 1_000 + FULL_MS - 1, FULL_MS) == Reads(False, False)
    assert reads_due(START, last, True, 1_000 + FULL_MS, FULL_MS) == Reads(True, True)


def test_a_kind_not_read_keeps_its_old_version_so_a_later_wake_up_still_reads_it() -> None:
    last = LastReads(START, 0)
    moved = KindVersions(4, 8)
    partial = after_reads(moved, last, Reads(True, False), 5)
    assert partial == LastReads(KindVersions(4, 7), 0)
    assert reads_due(moved, partial, True, 6, FULL_MS) == Reads(False, True)
    assert after_reads(moved, last, Reads(True, True), 5) == LastReads(moved, 5)


_steps = st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(0, 2 * FULL_MS)), max_size=30)


@given(_steps)
def test_no_notification_of_a_kind_goes_unread(steps) -> None:  # type: ignore[no-untyped-def]
    # Wake-ups with a relay, each after notifications of either kind (or neither): a kind whose topic
    # moved since it was last read is read at the next wake-up, whatever else happened between.
    versions, last, now_ms = KindVersions(0, 0), None, 0
    unread = Reads(False, False)
    for checks_moved, challenges_moved, elapsed_ms in steps:
        versions = KindVersions(versions.checks + checks_moved, versions.challenges + challenges_moved)
        unread = Reads(unread.checks or checks_moved, unread.challenges or challenges_moved)
        now_ms += elapsed_ms
        reads = reads_due(versions, last, True, now_ms, FULL_MS)
        assert reads.checks or not unread.checks
        assert reads.challenges or not unread.challenges
        last = after_reads(versions, last, reads, now_ms)
        unread = Reads(unread.checks and not reads.checks, unread.challenges and not reads.challenges)
