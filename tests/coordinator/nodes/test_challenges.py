"""Registration nonces in the shared database: single-use, bound to one key, expiring, and
redeemable at any coordinator sharing the database (each here is its own Database, as
each coordinator process holds its own engine)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.nodes.challenges import NONCE_TTL_MS, ChallengeBook
from coordinator.storage.database import Database

KEY_A, KEY_B = b"a" * 32, b"b" * 32
NOW = 1_000_000


@pytest.fixture
def other_coordinator(database: Database, database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    yield db
    db.dispose()


def test_a_nonce_is_good_once_and_only_for_its_key(database: Database) -> None:
    book = ChallengeBook(database)
    nonce, expires_at_ms = book.issue(KEY_A, NOW)
    assert expires_at_ms == NOW + NONCE_TTL_MS
    other, _ = book.issue(KEY_A, NOW)
    assert book.redeem(KEY_B, nonce, NOW) == "the registration nonce was issued for another public key"
    assert "unknown or already used" in (book.redeem(KEY_A, nonce, NOW) or "")  # spent by the wrong key
    assert book.redeem(KEY_A, other, NOW) is None
    assert "unknown or already used" in (book.redeem(KEY_A, other, NOW) or "")
    assert "unknown" in (book.redeem(KEY_A, b"\0" * 32, NOW) or "")
    assert "32 bytes" in (book.redeem(KEY_A, b"short", NOW) or "")


def test_an_expired_nonce_is_refused_and_purged_by_later_issues(database: Database) -> None:
    book = ChallengeBook(database, ttl_ms=10)
    stale, _ = book.issue(KEY_A, NOW)
    assert book.redeem(KEY_A, stale, NOW + 11) == "the registration nonce expired; call RegisterChallenge again"
    for _ in range(3):
        book.issue(KEY_A, NOW)
    assert book.outstanding() == 3
    book.issue(KEY_A, NOW + 100)  # the three are expired by then
    assert book.outstanding() == 1


def test_a_nonce_issued_by_one_coordinator_is_redeemed_at_another_once(
        database: Database, other_coordinator: Database) -> None:
    nonce, _ = ChallengeBook(database).issue(KEY_A, NOW)
    assert ChallengeBook(other_coordinator).redeem(KEY_A, nonce, NOW) is None
    assert ChallengeBook(database).redeem(KEY_A, nonce, NOW) is not None


def test_two_coordinators_racing_for_one_nonce_let_one_win(database: Database,
                                                           other_coordinator: Database) -> None:
    books = [ChallengeBook(database), ChallengeBook(other_coordinator)]
    nonces = [books[0].issue(KEY_A, NOW)[0] for _ in range(20)]
    outcomes: list[list[str | None]] = [[], []]
    start = threading.Barrier(2)

    def redeem_all(side: int) -> None:
        start.wait()
        outcomes[side] = [books[side].redeem(KEY_A, nonce, NOW) for nonce in nonces]

    threads = [threading.Thread(target=redeem_all, args=(side,)) for side in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for first, second in zip(*outcomes, strict=True):
        assert (first is None) != (second is None), (first, second)  # exactly one redeemed it


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=1, max_size=30))
def test_no_nonce_is_ever_redeemed_twice(database: Database, redeems: list[tuple[int, bool]]) -> None:
    """Invariant: whatever order redeems come in, from the right key or the wrong one, each
    issued nonce succeeds at most once, and never for the wrong key."""
    book = ChallengeBook(database)
    nonces = [book.issue(KEY_A, NOW)[0] for _ in range(5)]
    redeemed: set[int] = set()
    for index, right_key in redeems:
        refused = book.redeem(KEY_A if right_key else KEY_B, nonces[index], NOW)
        if refused is None:
            assert right_key and index not in redeemed
            redeemed.add(index)
    for index in range(5):  # clean up for the next example
        book.redeem(KEY_A, nonces[index], NOW)
