"""KnownKeys: a key is read once per process; unknown keys are never remembered."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from coordinator.errors import Unauthenticated
from coordinator.money.api_keys import KnownKeys
from coordinator.service import CoordinatorService
from tests.coordinator.gateway.service_harness import make_service, new_consumer


class CountingSessions:
    def __init__(self, service: CoordinatorService) -> None:
        self.service, self.opened = service, 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[Session]:
        self.opened += 1
        with self.service.db.read_transaction() as session:
            yield session


def test_a_key_is_read_once_and_a_bad_one_every_time(database_url: str) -> None:
    service = make_service(database_url)
    consumer = new_consumer(service, "acme")
    sessions, known = CountingSessions(service), KnownKeys()
    assert known.authenticate(sessions, consumer.key) == consumer.caller.key
    assert known.authenticate(sessions, consumer.key) == consumer.caller.key
    assert sessions.opened == 1
    wrong = consumer.key[:-4] + "abcd"
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            known.authenticate(sessions, wrong)
    assert sessions.opened == 3
    with pytest.raises(Unauthenticated, match="required"):
        known.authenticate(sessions, None)
    service.db.dispose()


def test_a_full_memory_starts_over(database_url: str) -> None:
    service = make_service(database_url)
    first, second = new_consumer(service, "a"), new_consumer(service, "b")
    sessions, known = CountingSessions(service), KnownKeys(keys_max=1)
    known.authenticate(sessions, first.key)
    known.authenticate(sessions, second.key)  # forgets the first
    known.authenticate(sessions, first.key)
    assert sessions.opened == 3
    known.authenticate(sessions, first.key)
    assert sessions.opened == 3
    service.db.dispose()
