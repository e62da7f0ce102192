"""The answer cache: fresh answers within the time bound, recomputed after it, bounded in size."""

from __future__ import annotations

from coordinator.world.cache import AnswerCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_answers_are_reused_only_while_fresh() -> None:
    clock, calls = Clock(), []
    cache = AnswerCache(ttl_s=1.0, entries_max=2, clock=clock)

    def compute(value: str):  # type: ignore[no-untyped-def]
        return lambda: calls.append(value) or value
    assert cache.get("a", compute("a1")) == "a1"
    assert cache.get("a", compute("a2")) == "a1"
    clock.now += 1.0
    assert cache.get("a", compute("a3")) == "a3"
    cache.get("b", compute("b1"))
    cache.get("c", compute("c1"))  # evicts the least recently used: a
    assert cache.get("a", compute("a4")) == "a4"
    assert calls == ["a1", "a3", "b1", "c1", "a4"]


def test_a_zero_bound_never_caches() -> None:
    cache, calls = AnswerCache(ttl_s=0), []
    for _ in range(3):
        cache.get("k", lambda: calls.append(1))
    assert len(calls) == 3
