from __future__ import annotations

import threading

from coordinator.live.notifier import Notifier


def test_wait_returns_when_its_topic_moves() -> None:
    notifier = Notifier()
    seen = notifier.version("job:1")
    woke = threading.Event()

    def waiter() -> None:
        notifier.wait("job:1", seen, timeout_s=30)
        woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    notifier.notify("job:2")
    notifier.notify("job:1")
    thread.join(30)
    assert woke.is_set() and notifier.version("job:1") == seen + 1


def test_wait_times_out_without_news() -> None:
    notifier = Notifier()
    assert notifier.wait("job:1", notifier.version("job:1"), timeout_s=0.01) == 0
