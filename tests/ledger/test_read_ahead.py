"""The audit's read-ahead: pages in order, a fetch failure surfaces in the caller, stopping early ends the thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from ledger.storage.store import _read_ahead


def _pages(count: int, fail_at: int | None = None) -> Iterator[list[tuple[int]]]:
    for number in range(count):
        if number == fail_at:
            raise ConnectionError("the server went away")
        yield [(number,)]


def _read_ahead_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "ledger-audit-read-ahead"]


def test_every_page_arrives_in_order() -> None:
    assert list(_read_ahead(_pages(50))) == [[(number,)] for number in range(50)]
    assert list(_read_ahead(_pages(0))) == []
    assert not _read_ahead_threads()


def test_a_failed_fetch_is_raised_after_the_pages_before_it() -> None:
    seen = []
    with pytest.raises(ConnectionError, match="went away"):
        for page in _read_ahead(_pages(10, fail_at=7)):
            seen.append(page[0][0])
    assert seen == list(range(7))
    assert not _read_ahead_threads()


def test_stopping_early_ends_the_fetching_thread() -> None:
    pages = _read_ahead(_pages(1_000))
    assert next(pages) == [(0,)]
    pages.close()  # what a caller's break or exception does to the generator
    assert not _read_ahead_threads()
