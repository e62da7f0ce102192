"""Uptime spans: signed heartbeats aggregated per run, proving exactly what their rows did."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.model import UptimeSpan
from coordinator.nodes.uptime import UptimeBook
from ledger.seats import availability_bps

CREDIT_MS = 10_000


def _book() -> UptimeBook:
    book = UptimeBook(CREDIT_MS, CREDIT_MS // 2)
    book.resume("a", None, None)
    return book


def _all_spans(book: UptimeBook) -> list[UptimeSpan]:
    """Every span, as a stopping coordinator would write them, latest version of each."""
    book.forget("a")
    due = book.due_writes(0, everything=True)
    return [span for span, _ in due]


@settings(max_examples=300, deadline=None)
@given(gaps=st.lists(st.integers(min_value=1, max_value=25_000), min_size=1, max_size=80),
       modes=st.lists(st.sampled_from(["ultra_seat", "dedicated"]), min_size=80, max_size=80),
       window=st.tuples(st.integers(0, 400_000), st.integers(1, 400_000)))
def test_spans_prove_the_same_availability_as_one_row_per_heartbeat(
        gaps: list[int], modes: list[str], window: tuple[int, int]) -> None:
    book, at, times = _book(), 0, []
    for i, gap in enumerate(gaps):
        at += gap
        assert book.record("a", modes[i], sent_at_ms=at, received_at_ms=at, signature=b"s" * 64)
        if modes[i] == "ultra_seat":
            times.append(at)
    spans = [s for s in _all_spans(book) if s.mode == "ultra_seat"]
    start, length = window
    expected = availability_bps(times, start, start + length, CREDIT_MS)
    from_spans = [t for s in spans for t in s.credit_times(CREDIT_MS, start, start + length)]
    assert availability_bps(from_spans, start, start + length, CREDIT_MS) == expected
    assert len(from_spans) <= len(times) + len(spans) + length // CREDIT_MS + 2 * len(spans)
    assert sum(s.beats for s in spans) == len(times)


def test_replays_are_refused_and_steady_beats_make_one_span_written_now_and_then() -> None:
    book = _book()
    assert book.record("a", "ultra_seat", 1_000, 1_000, b"1" * 64)
    assert not book.record("a", "ultra_seat", 1_000, 1_500, b"1" * 64)  # the same signed time
    assert not book.record("a", "ultra_seat", 900, 1_600, b"0" * 64)  # older
    due = book.due_writes(1_000)
    assert [(s.beats, exists) for s, exists in due] == [(1, False)]  # a new span: written at once
    book.stored([s for s, _ in due])
    writes = 0
    for at in range(2_000, 31_000, 1_000):
        book.record("a", "ultra_seat", at, at, b"2" * 64)
        due = book.due_writes(at)
        assert all(exists for _, exists in due)
        book.stored([s for s, _ in due])
        writes += len(due)
    assert writes == 5  # its end is rewritten every 5 s (at 6, 11, 16, 21, 26 s), not per beat
    spans = _all_spans(book)
    assert len(spans) == 1 and spans[0].beats == 30 and spans[0].last_received_ms == 30_000


def test_a_resumed_span_continues_within_the_credit_and_keeps_its_replay_floor() -> None:
    stored = UptimeSpan("a", "ultra_seat", 0, 50_000, 0, 50_000, 51, b"f" * 64, b"l" * 64)
    book = UptimeBook(CREDIT_MS, CREDIT_MS // 2)
    book.resume("a", stored, 50_000)
    assert not book.record("a", "ultra_seat", 50_000, 55_000, b"x" * 64)
    assert book.record("a", "ultra_seat", 55_000, 58_000, b"x" * 64)
    due = book.due_writes(58_000)
    assert [(s.first_received_ms, s.last_received_ms, s.beats, exists) for s, exists in due] == [
        (0, 58_000, 52, True)]
