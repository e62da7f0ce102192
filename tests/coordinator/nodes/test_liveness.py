"""The liveness book: heartbeats in memory, the database written in batches and only on change."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.lending import LendingMode, LendingState
from coordinator.model import LeaseWrite
from coordinator.nodes.liveness import Beat, LivenessBook

OFFLINE_AFTER_MS = 10_000
SEAT = LendingState(mode=LendingMode.ULTRA_SEAT)


def _book(registered_ms: int = 0, *node_ids: str) -> LivenessBook:
    book = LivenessBook(OFFLINE_AFTER_MS)
    for node_id in node_ids or ("a",):
        book.adopt(node_id, registered_ms, LendingState(), ())
    return book


def _flush(book: LivenessBook, now_ms: int) -> list[LeaseWrite]:
    writes = book.due_writes(now_ms)
    book.stored(writes)
    return writes


def test_steady_heartbeats_change_nothing_schedulable_and_write_only_lease_refreshes() -> None:
    book = _book(0)
    writes = []
    for at in range(1_000, 60_001, 1_000):  # a minute of beats every second, flushed every second
        outcome = book.beat(Beat("a", at, 0, LendingState()))
        assert not outcome.schedulable
        writes += _flush(book, at)
    # The lease (refreshed once half spent) is rewritten every 5 s, never per beat.
    assert [w.last_heartbeat_ms for w in writes] == list(range(5_000, 60_001, 5_000))


def test_a_node_that_stops_goes_offline_once_without_a_write_and_comes_back_with_one() -> None:
    book = _book(0)
    book.beat(Beat("a", 2_000, 0))
    assert book.gone_offline(12_000) == []  # exactly the limit: still online
    assert _flush(book, 12_001) == [LeaseWrite("a", 2_000, 0)]  # the one beat since its lease
    assert _flush(book, 20_000) == []  # silent since: its lease runs out, unwritten
    assert book.gone_offline(12_001) == ["a"] and book.gone_offline(99_000) == []
    assert not book.knows("a")
    book.adopt("a", 2_000, LendingState(), ())
    assert book.beat(Beat("a", 30_000, 0)).came_online


def test_a_comeback_left_to_the_batch_is_written_by_it_once_and_marked_for_placement() -> None:
    book = _book(0)
    assert book.beat(Beat("a", 30_000, 1)).came_online
    assert book.comebacks_waiting() == 1
    book.stored([LeaseWrite("a", 0, 0)])  # a batch read before the beat, stored after it
    assert book.comebacks_waiting() == 1  # its lease still ran out before the comeback
    assert book.beat(Beat("a", 31_000, 1)).came_online  # unwritten yet: still a comeback
    assert _flush(book, 31_000) == [LeaseWrite("a", 31_000, 1, came_online=True)]
    assert book.comebacks_waiting() == 0 and _flush(book, 40_000) == []
    assert not book.beat(Beat("a", 32_000, 1)).came_online


def test_a_comeback_the_caller_writes_at_once_leaves_nothing_for_the_batch() -> None:
    book = _book(0)
    assert book.beat(Beat("a", 30_000, 0)).came_online
    book.stored([book.current_write("a")])
    assert book.comebacks_waiting() == 0 and _flush(book, 30_000) == []


def test_a_node_that_goes_offline_again_before_its_comeback_is_written_is_no_comeback() -> None:
    book = _book(0)
    book.beat(Beat("a", 30_000, 0))
    assert book.gone_offline(40_001) == ["a"]
    assert book.comebacks_waiting() == 0 and _flush(book, 40_001) == []


def test_a_silent_node_gets_no_refresh() -> None:
    book = _book(0)
    assert _flush(book, 5_000) == [] and _flush(book, 9_000) == []


def test_terms_and_running_jobs() -> None:
    book = _book(0)
    assert book.beat(Beat("a", 1_000, 0, SEAT)).terms_changed
    assert not book.beat(Beat("a", 2_000, 0, SEAT)).terms_changed
    assert book.beat(Beat("a", 3_000, 0, SEAT, ("m",))).terms_changed  # a model warmed up
    assert not book.beat(Beat("a", 4_000, 0)).terms_changed  # an old agent says nothing of terms
    book.beat(Beat("a", 4_500, 2, SEAT, ("m",)))
    assert _flush(book, 4_500) == [LeaseWrite("a", 4_500, 2)]  # a count changed: next batch
    assert _flush(book, 4_600) == []


@settings(max_examples=300, deadline=None)
@given(gaps=st.lists(st.integers(min_value=1, max_value=15_000), min_size=1, max_size=60),
       flush_every_ms=st.integers(min_value=100, max_value=2_500))
def test_the_stored_lease_trails_the_last_heartbeat_by_at_most_half_the_limit(
        gaps: list[int], flush_every_ms: int) -> None:
    """For any heartbeat times and flush cadence: a batch writes at most one row per node; the
    stored lease is never newer than the last heartbeat heard (so going offline needs no write);
    and after each batch it trails that heartbeat by at most refresh_after_ms (so readers of the
    database see a node online while it beats)."""
    book = _book(0)
    stored, heard, next_flush = 0, 0, flush_every_ms
    for beat_ms in itertools.accumulate(gaps):
        while next_flush < beat_ms:
            writes = _flush(book, next_flush)
            assert len(writes) <= 1
            for write in writes:
                assert write.last_heartbeat_ms <= heard
                stored = max(stored, write.last_heartbeat_ms)
            if book.knows("a"):
                assert next_flush - stored <= max(book.refresh_after_ms, next_flush - heard)
            book.gone_offline(next_flush)
            next_flush += flush_every_ms
        if not book.knows("a"):
            book.adopt("a", stored, LendingState(), ())
        outcome = book.beat(Beat("a", beat_ms, 0))
        if outcome.came_online:  # the caller writes at once
            write = book.current_write("a")
            book.stored([write])
            stored = write.last_heartbeat_ms
        heard = beat_ms
