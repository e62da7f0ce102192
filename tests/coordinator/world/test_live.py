"""The live feed with a fake snapshot: which events each read produces, and slow or closed subscribers."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.live.notifier import (
    FLEET_TOPIC_PREFIX, NODE_TOPIC_PREFIX, Notifier, fleet_topic, job_topic, node_topic,
)
from coordinator.world import live
from coordinator.world.live import Event, FleetState, Snapshot, TooManySubscribers, WorldFeed
from coordinator.world.totals import Totals, TotalsHistory


def _totals(online: int, at_ms: int = 1) -> Totals:
    return Totals(at_ms=at_ms, macs_total=10_000, macs_online=online, macs_busy=0, pods_online=0,
                  memory_lendable_bytes=0, largest=None, jobs_last_minute=0, tokens_last_minute=0,
                  operator_paid_base_units=0, operator_held_base_units=0)


class Reads:
    def __init__(self) -> None:
        self.next = Snapshot((1,), _totals(1), (-1, 0))

    def fleet(self) -> FleetState:
        return FleetState(self.next.fingerprint, self.next.epochs)

    def totals(self) -> Totals:
        return self.next.totals


def _names(events: list[Event]) -> list[str]:
    return [event.name for event in events]


def test_each_read_reports_only_what_changed() -> None:
    reads = Reads()
    feed = WorldFeed(reads.fleet, reads.totals, TotalsHistory(interval_ms=1), background=False)
    assert _names(feed.tick()) == ["totals"]  # the first fingerprint is the baseline
    assert feed.tick() == []
    reads.next = Snapshot((1,), _totals(1, at_ms=99), (-1, 0))
    assert feed.tick() == []  # only the timestamp moved
    reads.next = Snapshot((2,), _totals(2), (7, 1))
    assert _names(feed.tick()) == ["fleet", "epoch", "totals"]
    assert feed.version == 1
    assert [e.data for e in feed.current()] == [{"version": 1}, _totals(2).to_json(), {"last_closed": 7, "anchored": 1}]
    assert len(feed.history.samples()) >= 2
    assert Event("fleet", {"version": 1}).encode() == 'event: fleet\ndata: {"version":1}\n\n'


def test_subscribers_get_events_and_a_stalled_one_is_dropped() -> None:
    reads = Reads()
    feed = WorldFeed(reads.fleet, reads.totals, TotalsHistory(), background=False)

    async def scenario() -> tuple[list[Event | None], bool, list[Event | None]]:
        loop = asyncio.get_running_loop()
        fast, slow = feed.subscribe(loop), feed.subscribe(loop)
        received: list[Event | None] = []
        for version in range(2, 2 + live.QUEUE_EVENTS_MAX + 5):
            reads.next = Snapshot((version,), _totals(version), (-1, 0))
            await asyncio.to_thread(feed.tick)
            await asyncio.sleep(0)  # let call_soon_threadsafe deliver
            while not fast.queue.empty():
                received.append(fast.queue.get_nowait())
        leftovers = []
        while not slow.queue.empty():
            leftovers.append(slow.queue.get_nowait())
        feed.stop()
        await asyncio.sleep(0)
        final = fast.queue.get_nowait()
        return received + [final], slow.dropped, leftovers

    received, dropped, leftovers = asyncio.run(scenario())
    assert received[-1] is None  # stop() ends every stream
    assert sum(1 for e in received if e is not None and e.name == "fleet") == live.QUEUE_EVENTS_MAX + 4
    assert dropped and leftovers[-1] is None  # the stalled subscriber's stream was ended, not grown


def test_subscriptions_are_limited_and_refused_after_stop() -> None:
    feed = WorldFeed(Reads().fleet, Reads().totals, TotalsHistory(), background=False, subscribers_max=2)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first = feed.subscribe(loop)
        feed.subscribe(loop)
        with pytest.raises(TooManySubscribers):
            feed.subscribe(loop)
        feed.unsubscribe(first)
        feed.subscribe(loop)
        feed.stop()
        with pytest.raises(TooManySubscribers):
            feed.subscribe(loop)
    asyncio.run(scenario())


def test_a_fleet_notification_wakes_the_reader_long_before_its_tick() -> None:
    # The safety-net tick is an hour: only the notifier's wake-up can bring the event in time.
    reads = Reads()
    notifier = Notifier()
    feed = WorldFeed(reads.fleet, reads.totals, TotalsHistory(interval_ms=3_600_000), tick_s=3_600)
    unwatch = notifier.watch((FLEET_TOPIC_PREFIX, NODE_TOPIC_PREFIX), feed.wake)

    async def next_fleet_event(subscriber: live.Subscriber) -> Event:
        while True:
            event = await asyncio.wait_for(subscriber.queue.get(), 30)
            assert event is not None
            if event.name == "fleet":
                return event

    async def scenario() -> list[Event]:
        subscriber = feed.subscribe(asyncio.get_running_loop())
        first = await asyncio.wait_for(subscriber.queue.get(), 30)  # the baseline read's totals
        assert first is not None and first.name == "totals"
        seen = []
        for fingerprint, topic in (((2,), fleet_topic("mac-1")), ((3,), node_topic("mac-1"))):
            reads.next = Snapshot(fingerprint, _totals(1), (-1, 0))
            notifier.notify_local(topic)
            seen.append(await next_fleet_event(subscriber))
        return seen

    try:
        seen = asyncio.run(scenario())
    finally:
        unwatch()
        feed.stop()
    assert [e.data for e in seen] == [{"version": 1}, {"version": 2}]


def test_an_unwatched_call_is_not_called_again() -> None:
    notifier = Notifier()
    calls: list[int] = []
    unwatch = notifier.watch((FLEET_TOPIC_PREFIX,), lambda: calls.append(1))
    notifier.notify_local(fleet_topic("a"), fleet_topic("b"), job_topic("j"))
    notifier.notify_local(job_topic("j"))
    unwatch()
    unwatch()  # twice is harmless
    notifier.notify_local(fleet_topic("a"))
    assert calls == [1]
