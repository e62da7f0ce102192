"""Between the event loop and the coordinator's blocking service.

CoordinatorService is synchronous (database transactions, a threading notifier).
The gateway calls it on worker threads, never on the event loop, and reads each
job's stream on a thread of its own that hands events to the loop as they come.
All of it is bounded: calls in flight, open streams, background cancels.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import anyio

from coordinator.errors import AlreadyDone, CoordinatorError, NoCapacityNow, NotFound
from coordinator.model import ERROR_CANCELLED, TokenChunk
from coordinator.money.api_keys import Caller
from coordinator.service import CoordinatorService, JobView, Watch

log = logging.getLogger(__name__)
T = TypeVar("T")
_END = object()


class JobEvents:
    """A job's token chunks, then its final view, read on a thread from service.stream_job."""

    def __init__(self, service: CoordinatorService, job_id: str, caller: Caller,
                 on_close: Callable[[], None], watch: Watch | None = None) -> None:
        self._service, self.job_id, self._caller, self._watch = service, job_id, caller, watch
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._closed = threading.Event()
        self._on_close = on_close
        threading.Thread(target=self._pump, name=f"gateway-{job_id}", daemon=True).start()

    def _deliver(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop closed: the gateway is stopping
            self._closed.set()

    def _pump(self) -> None:
        try:
            for item in self._service.stream_job(self.job_id, lambda: not self._closed.is_set(),
                                                 self._caller, self._watch):
                self._deliver(item)
        except CoordinatorError as error:
            self._deliver(error)
        finally:
            self._deliver(_END)
            self._on_close()

    async def next(self) -> TokenChunk | JobView:
        item = await self._queue.get()
        if isinstance(item, CoordinatorError):
            raise item
        assert item is not _END, "a job's stream ends with its final view"
        return item  # type: ignore[return-value]

    def close(self) -> None:
        """Stop reading; the thread ends at its next wake-up."""
        self._closed.set()


class Bridge:
    def __init__(self, service: CoordinatorService, calls_max: int, streams_max: int) -> None:
        self.service = service
        self._limiter = anyio.CapacityLimiter(calls_max)
        # Waits for a Mac last seconds; on their own threads they never starve the calls.
        self._waits = anyio.CapacityLimiter(streams_max)
        self._streams = threading.BoundedSemaphore(streams_max)
        self._streams_max = streams_max
        self._cancels = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gateway-cancel")

    async def call(self, function: Callable[..., T], *args: object, **kwargs: object) -> T:
        """Run a blocking service call on a worker thread."""
        return await anyio.to_thread.run_sync(functools.partial(function, *args, **kwargs),
                                              limiter=self._limiter)

    async def wait(self, function: Callable[..., T], *args: object) -> T:
        """Run a call that only waits (for a Mac); a cancelled caller stops waiting at once."""
        return await anyio.to_thread.run_sync(functools.partial(function, *args),
                                              limiter=self._waits, abandon_on_cancel=True)

    def take_stream_slot(self) -> Callable[[], None]:
        """One of the streams the gateway allows, taken before the job is submitted (a full
        gateway then refuses with nothing to undo); returns its release."""
        if not self._streams.acquire(blocking=False):
            raise NoCapacityNow(f"the gateway is streaming its limit of {self._streams_max} jobs; "
                                "retry shortly", retry_after_s=1)
        return self._streams.release

    def open_events(self, job_id: str, caller: Caller, release_slot: Callable[[], None],
                    watch: Watch | None = None) -> JobEvents:
        """The job's events, in the slot taken for them; they take over the submitter's
        watch, if any, and release the slot when they end."""
        return JobEvents(self.service, job_id, caller, release_slot, watch)

    def cancel_soon(self, job_id: str, caller: Caller, code: str = ERROR_CANCELLED) -> None:
        """End a job (its client went away, or it reached a stop sequence) off the event loop."""
        self._cancels.submit(self.cancel, job_id, caller, code)

    def cancel(self, job_id: str, caller: Caller, code: str = ERROR_CANCELLED) -> None:
        try:
            self.service.cancel_job(job_id, caller, code=code)
            log.info("job %s ended early: %s", job_id, code)
        except (AlreadyDone, NotFound):
            pass  # it ended on its own meanwhile

    def close(self) -> None:
        self._cancels.shutdown(wait=True)
