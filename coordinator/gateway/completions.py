"""Running one completion: submit, wait for the first token, then answer or stream.

Headers go out only with the first token, so a job that fails before it (the
prompt is too long for the model, its node died and no Mac could take it over)
answers with a proper HTTP error, and a hand-back to another Mac stays invisible.
After the first token a failure ends the stream with an error event. A client
that goes away cancels its job; it pays for the tokens made, and no more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from contracts import hop_trace
from coordinator.errors import JobFailed, NoCapacityNow, PromptTooLong
from coordinator.gateway.bridge import Bridge, JobEvents
from coordinator.gateway.errors import JOB_ID_HEADER, JobError, body_for
from coordinator.gateway.render import (
    DONE_EVENT,
    ReasoningCounter,
    StreamRenderer,
    ended_well,
    final_body,
    finish_reason,
    job_usage,
    reasoning_delta,
    sse,
    tool_calls_reason,
)
from coordinator.gateway.requests import ResponsePlan
from coordinator.gateway.tools import StreamedCalls
from coordinator.jobs.stops import StopScanner
from coordinator.jobs.submission import Submission
from coordinator.model import (
    ERROR_NO_CAPACITY,
    ERROR_PROMPT_TOO_LONG,
    ERROR_STOP_SEQUENCE,
    JobRecord,
    JobStatus,
    TokenChunk,
)
from coordinator.money.api_keys import Caller
from coordinator.service import CoordinatorService, JobView, Watch

log = logging.getLogger(__name__)
T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


class EventStreamResponse(StreamingResponse):
    """Server-sent events whose generator always runs its cleanup, even on disconnect."""

    media_type = "text/event-stream"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def _until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, or raise ClientGone as soon as the client disconnects."""
    outcome: list[T] = []
    async with anyio.create_task_group() as group:
        async def run() -> None:
            outcome.append(await work)
            group.cancel_scope.cancel()

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(run)
        group.start_soon(watch)
    if not outcome:
        raise ClientGone()
    return outcome[0]


def failure_error(job: JobRecord) -> JobFailed | PromptTooLong:
    if job.error_code == ERROR_PROMPT_TOO_LONG:
        return PromptTooLong(job.error or "the prompt does not fit the model's context",
                             param="messages" if job.prompt_format == "chat" else "prompt")
    return JobFailed(f"job {job.job_id} failed: {job.error}")


async def _collect(bridge: Bridge, plan: ResponsePlan, events: JobEvents,
                   first: TokenChunk | JobView, caller: Caller) -> tuple[JobView, list[TokenChunk]]:
    """Every chunk and the final view; ends the job early once a stop sequence appears."""
    chunks: list[TokenChunk] = []
    scanner = StopScanner(plan.stop)
    item = first
    while isinstance(item, TokenChunk):
        chunks.append(item)
        if not scanner.stopped:
            scanner.feed(item.text)
            if scanner.stopped:  # the node need not generate further
                bridge.cancel_soon(events.job_id, caller, ERROR_STOP_SEQUENCE)
        item = await events.next()
    return item, chunks


async def _admitted(bridge: Bridge, request: Request, caller: Caller, view: JobView) -> JobView:
    """The job once a Mac took it; a 503 when none did within the admission wait."""
    if view.job.status is not JobStatus.QUEUED:
        return view
    config = bridge.service.config
    view = await _until_disconnect(request, bridge.wait(
        bridge.service.jobs.wait_until_placed, view.job.job_id, caller, config.admission_wait_s))
    if view.job.status is JobStatus.QUEUED:
        await bridge.call(bridge.cancel, view.job.job_id, caller, ERROR_NO_CAPACITY)
        raise JobError(NoCapacityNow(
            f"no Mac could take this job within {config.admission_wait_s:g} s (it was number "
            f"{view.queue_position} in the queue); retry after the Retry-After seconds",
            retry_after_s=config.busy_retry_after_s), view.job.job_id)
    return view


async def _failed(bridge: Bridge, job: JobRecord) -> JobError:
    """Settle a job that ended badly before the client reads the error, then the error."""
    await bridge.call(bridge.service.money.close_billing, job.job_id)
    return JobError(failure_error(job), job.job_id)


# The request's own part of a job: what to submit and how to answer, once the caller is known.
SubmissionFor = Callable[[Caller], tuple[Submission, ResponsePlan]]
# A streamed answer: (bridge, plan, events, first event, caller, created_s) -> server-sent events.
StreamFor = Callable[[Bridge, ResponsePlan, JobEvents, "TokenChunk | JobView", Caller, int],
                     AsyncIterator[str]]


@dataclass(frozen=True)
class Answer:
    """How a route shapes a job's answer: OpenAI's (the default) or Anthropic's, say."""

    whole: Callable[[ResponsePlan, JobRecord, list[TokenChunk]], dict]
    stream: StreamFor


def _authenticate_and_submit(service: CoordinatorService, api_key: str | None,
                             submission_for: SubmissionFor
                             ) -> tuple[Caller, ResponsePlan, JobView, Watch | None]:
    """On a worker thread: the key's check and the submit, one hop off the event loop.

    The submit does not wait for the disk: run_completion makes it durable while the
    node starts, before the client hears of the job."""
    hop_trace.hop("submit")
    caller = service.jobs.authenticate_consumer(api_key, to_submit=True)
    submission, plan = submission_for(caller)
    view, watch = service.jobs.submit_watched(submission, caller, durable=False)
    return caller, plan.with_features(service.jobs.chat_features(submission.model_id)), view, watch


async def run_completion(bridge: Bridge, request: Request, api_key: str | None,
                         submission_for: SubmissionFor, answer: Answer | None = None) -> Response:
    hop_trace.begin_request()
    release_slot: Callable[[], None] | None = bridge.take_stream_slot()
    try:
        caller, plan, view, watch = await bridge.call(_authenticate_and_submit, bridge.service,
                                                      api_key, submission_for)
    except BaseException:
        release_slot()
        raise
    # The disk's wait (milliseconds) overlaps the node's start instead of preceding it.
    durable = asyncio.ensure_future(bridge.call(bridge.service.db.make_durable))
    job_id = view.job.job_id
    headers = {JOB_ID_HEADER: job_id}
    events: JobEvents | None = None
    try:
        view = await _admitted(bridge, request, caller, view)
        events = bridge.open_events(job_id, caller, release_slot, watch)
        watch = release_slot = None  # the events own them now
        first = await _until_disconnect(request, events.next())
        hop_trace.job_hop(job_id, "first event on the event loop")
        if isinstance(first, JobView) and not ended_well(first.job):
            raise await _failed(bridge, first.job)
        answer = answer or OPENAI_ANSWER
        if plan.stream:
            stream = answer.stream(bridge, plan, events, first, caller, view.job.created_at_ms // 1000)
            events = None  # the stream owns it now
            return EventStreamResponse(stream, headers=headers)
        final, chunks = await _until_disconnect(request, _collect(bridge, plan, events, first, caller))
        if not ended_well(final.job):
            raise await _failed(bridge, final.job)
        return JSONResponse(answer.whole(plan, final.job, chunks), headers=headers)
    except ClientGone:
        log.info("client of job %s went away before its answer", job_id)
        bridge.cancel_soon(job_id, caller)
        return Response(status_code=499)
    finally:
        if watch is not None:
            watch.close()
        if release_slot is not None:
            release_slot()
        if events is not None:
            events.close()
        try:
            await durable  # no answer, not even an error naming the job, goes out before it
        except BaseException:
            bridge.cancel_soon(job_id, caller)  # the client is told it failed: it must not run on
            raise


async def _events(bridge: Bridge, plan: ResponsePlan, events: JobEvents,
                  first: TokenChunk | JobView, caller: Caller, created_s: int) -> AsyncIterator[str]:
    """The job as OpenAI chunks; cancels the job if the client leaves before its end."""
    renderer = StreamRenderer(plan, events.job_id, created_s)
    scanner = StopScanner(plan.stop)
    calls = StreamedCalls(events.job_id) if plan.tool_calls else None
    thinking = ReasoningCounter(plan.reasoning_inside) if plan.reasoning else None
    finished, streamed = False, 0
    item = first
    try:
        if plan.kind == "chat":
            yield renderer.role_chunk()
        while isinstance(item, TokenChunk):
            streamed += len(item.token_ids)
            if not scanner.stopped:
                offset = scanner.shown_chars
                text = scanner.feed(item.text)
                logprobs = item.logprobs if plan.logprobs else ()
                deltas: list[dict] = []
                if thinking is not None:
                    reasoning, text = thinking.feed(text, len(item.token_ids))
                    if reasoning:
                        yield renderer.delta_chunk(reasoning_delta(reasoning))
                if calls is not None:
                    text, deltas = calls.feed(text)
                if text or logprobs:
                    if not offset:
                        hop_trace.job_hop(events.job_id, "first text to the client")
                    yield renderer.content_chunk(text, logprobs, offset)
                for delta in deltas:
                    yield renderer.delta_chunk(delta)
                if scanner.stopped:  # the node need not generate further
                    bridge.cancel_soon(events.job_id, caller, ERROR_STOP_SEQUENCE)
            item = await events.next()
        finished = True
        if not ended_well(item.job):  # settle before the client reads the error and looks
            await bridge.call(bridge.service.money.close_billing, events.job_id)
        yield _ending(renderer, scanner, item.job, streamed, calls, thinking)
        yield DONE_EVENT
    finally:
        events.close()
        if not finished:
            bridge.cancel_soon(events.job_id, caller)


def _ending(renderer: StreamRenderer, scanner: StopScanner, job: JobRecord, streamed: int,
            calls: StreamedCalls | None, thinking: ReasoningCounter | None) -> str:
    if not ended_well(job):
        return sse(body_for(failure_error(job)))
    ending = ""
    rest = scanner.flush()
    reason = finish_reason(job, scanner.stopped)
    if thinking is not None:
        reasoning, rest = thinking.feed(rest, 0)
        more_reasoning, more = thinking.finish()
        reasoning, rest = reasoning + more_reasoning, rest + more
        if reasoning:
            ending += renderer.delta_chunk(reasoning_delta(reasoning))
    if calls is not None:
        shown, deltas = calls.feed(rest)
        held, more = calls.finish()
        rest, deltas = shown + held, deltas + more
    if rest:
        ending += renderer.content_chunk(rest, (), scanner.shown_chars - len(rest))
    if calls is not None:
        ending += "".join(renderer.delta_chunk(delta) for delta in deltas)
        reason = tool_calls_reason(reason) if calls.sent else reason
    ending += renderer.finish_chunk(reason)
    if renderer.plan.include_usage:
        ending += renderer.usage_chunk(job_usage(job, streamed, thinking.tokens if thinking else None))
    return ending


OPENAI_ANSWER = Answer(final_body, _events)
