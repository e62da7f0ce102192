"""Blocking service calls off the gRPC event loop, in bounded pools kept apart.

The servicers run on grpc.aio's event loop, where an open stream holds no thread. The
service is blocking (SQL), so each call runs on a pool: heartbeats on their own, other
unary calls on another, and stream steps on a third, so that no number of open streams
can queue a heartbeat or a Register behind them. A stream's waits (live.notifier.Wait)
happen on the event loop, between steps.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from coordinator.live.notifier import Notifier, Wait

T = TypeVar("T")
_END = object()


@dataclass(frozen=True)
class PoolSizes:
    heartbeats: int = 8
    calls: int = 32
    stream_steps: int = 16


class Offload:
    def __init__(self, notifier: Notifier, sizes: PoolSizes = PoolSizes()) -> None:
        self._notifier = notifier
        self._heartbeats = ThreadPoolExecutor(sizes.heartbeats, thread_name_prefix="rpc-heartbeat")
        self._calls = ThreadPoolExecutor(sizes.calls, thread_name_prefix="rpc-call")
        self._steps = ThreadPoolExecutor(sizes.stream_steps, thread_name_prefix="rpc-stream")

    async def heartbeat(self, function: Callable[..., T], *args: object) -> T:
        return await _run(self._heartbeats, function, *args)

    async def call(self, function: Callable[..., T], *args: object) -> T:
        return await _run(self._calls, function, *args)

    async def step(self, function: Callable[..., T], *args: object) -> T:
        """A short blocking piece of a stream (e.g. storing one chunk)."""
        return await _run(self._steps, function, *args)

    async def drain(self, steps: Iterator[T | Wait]) -> AsyncIterator[T]:
        """The items of a stream's steps; each step runs on the stream pool, each Wait on the loop."""
        in_flight = False
        try:
            while True:
                in_flight = True
                item = await _advance(self._steps, steps)
                in_flight = False
                if item is _END:
                    return
                if isinstance(item, Wait):
                    await self._notifier.wait_async(item.topic, item.seen_version, item.timeout_s)
                else:
                    yield item  # type: ignore[misc]
        finally:
            if not in_flight:  # a step still running closes the steps itself when it ends
                steps.close()

    def close(self) -> None:
        """After the server stopped: drop queued calls, and wait for running ones (each is short),
        so no database connection is still out when the database is disposed of."""
        for pool in (self._heartbeats, self._calls, self._steps):
            pool.shutdown(wait=True, cancel_futures=True)


async def _run(pool: ThreadPoolExecutor, function: Callable[..., T], *args: object) -> T:
    return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(function, *args))


async def _advance(pool: ThreadPoolExecutor, steps: Iterator[T]) -> object:
    """next(steps) on the pool. Cancelled meanwhile, the step finishes and then steps close:
    a generator cannot be closed while it runs."""
    future = asyncio.get_running_loop().run_in_executor(pool, next, steps, _END)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(lambda _: _close_later(pool, steps))
        raise


def _close_later(pool: ThreadPoolExecutor, steps: Iterator[object]) -> None:
    try:
        pool.submit(steps.close)  # type: ignore[attr-defined]
    except RuntimeError:  # the pool has shut down: close here, the step has ended
        steps.close()  # type: ignore[attr-defined]
