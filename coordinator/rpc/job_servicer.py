"""gRPC edge for API consumers.

Every call names its caller with an API key in the `authorization` metadata entry
(`Bearer mlxk_...`); without one it is anonymous, allowed only when the coordinator
runs with anonymous access. A consumer sees only its own jobs.
"""

from __future__ import annotations

import functools

import grpc

from coordinator.errors import AlreadyDone
from coordinator.jobs.stops import StopScanner
from coordinator.model import ERROR_STOP_SEQUENCE, TokenChunk
from coordinator.money.api_keys import Caller
from coordinator.rpc import convert
from coordinator.rpc.offload import Offload
from coordinator.rpc.status import translate_errors, translate_stream_errors
from coordinator.rpc.stream_limits import OpenStreams
from coordinator.service import CoordinatorService, JobView
from protos.mlxnet.v1 import job_pb2, job_pb2_grpc

CONSUMER_METADATA_KEY = "x-mlxnet-consumer"  # an anonymous caller's self-chosen name
AUTHORIZATION_METADATA_KEY = "authorization"
BEARER_PREFIX = "bearer "


def bearer_key(authorization: str | None) -> str | None:
    """The key in an `Authorization: Bearer <key>` value, or None when there is none."""
    if not authorization:
        return None
    if authorization[:len(BEARER_PREFIX)].lower() != BEARER_PREFIX:
        return authorization.strip()  # a bare key; authenticate says if it is malformed
    return authorization[len(BEARER_PREFIX):].strip() or None


def peer_host(context: grpc.aio.ServicerContext) -> str:
    """The caller's address without its port ("ipv4:1.2.3.4:5" -> "1.2.3.4")."""
    peer = context.peer() or "unknown"
    return peer.split(":", 1)[-1].rpartition(":")[0] or peer


class JobServicer(job_pb2_grpc.JobServiceServicer):
    """Runs on grpc.aio's event loop; every service call is offloaded to a bounded pool."""

    def __init__(self, service: CoordinatorService, offload: Offload, streams: OpenStreams) -> None:
        self._service = service
        self._offload = offload
        self._streams = streams

    async def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        metadata = dict(context.invocation_metadata() or ())
        return await self._offload.call(
            self._service.jobs.authenticate_consumer,
            bearer_key(metadata.get(AUTHORIZATION_METADATA_KEY)),
            metadata.get(CONSUMER_METADATA_KEY, ""))

    @translate_errors
    async def SubmitJob(self, request, context):  # noqa: N802 (gRPC names)
        caller = await self._caller(context)
        submission = convert.submission_from_pb(
            request, caller.consumer_id, caller.key.key_id if caller.key else None)
        view = await self._offload.call(functools.partial(
            self._service.jobs.submit, submission, caller, place_now=request.no_queue))
        return job_pb2.SubmitJobResponse(job=self._job_pb(view))

    @translate_errors
    async def GetJob(self, request, context):  # noqa: N802
        caller = await self._caller(context)
        view = await self._offload.call(self._service.jobs.get, request.job_id, caller)
        return job_pb2.GetJobResponse(job=self._job_pb(view))

    @translate_stream_errors
    async def StreamJob(self, request, context):  # noqa: N802
        """Every token; the text cut before the job's first stop sequence, which ends the job."""
        caller = await self._caller(context)
        holder = (f"key {caller.key.key_id}" if caller.key
                  else f"anonymous callers at {peer_host(context)}")
        with self._streams.hold("StreamJob", holder, self._streams.limits.job_streams_per_consumer):
            view = await self._offload.call(self._service.jobs.get, request.job_id, caller)
            scanner = StopScanner(view.job.stop)
            next_index = 0
            steps = self._service.jobs.stream_steps(request.job_id, caller)
            async for item in self._offload.drain(steps):
                if isinstance(item, TokenChunk):
                    next_index = item.first_index + len(item.token_ids)
                    stopped = scanner.stopped
                    text = scanner.feed(item.text)
                    yield job_pb2.StreamJobResponse(
                        first_index=item.first_index, token_ids=list(item.token_ids), text=text,
                        logprobs=[convert.logprob_to_pb(entry) for entry in item.logprobs])
                    if scanner.stopped and not stopped:
                        await self._offload.call(self._end_at_stop, request.job_id, caller)
                else:
                    if rest := scanner.flush():  # text held back in case a stop sequence followed
                        yield job_pb2.StreamJobResponse(first_index=next_index, text=rest)
                    yield job_pb2.StreamJobResponse(final_job=self._job_pb(item))

    def _job_pb(self, view: JobView) -> job_pb2.Job:
        """The job; a completed chat job's answer read with its model's chat features."""
        return convert.job_to_pb(view, self._service.jobs.chat_features(view.job.model_id))

    def _end_at_stop(self, job_id: str, caller: Caller) -> None:
        try:
            self._service.jobs.cancel(job_id, caller, code=ERROR_STOP_SEQUENCE)
        except AlreadyDone:
            pass  # it ended on its own meanwhile

    @translate_errors
    async def ExplainPlacement(self, request, context):  # noqa: N802
        await self._caller(context)
        decision = await self._offload.call(
            self._service.jobs.explain_placement, request.model, request.context_tokens,
            request.min_decode_tokens_per_s)
        return convert.placement_to_pb(decision)

    @translate_errors
    async def CancelJob(self, request, context):  # noqa: N802
        caller = await self._caller(context)
        view = await self._offload.call(self._service.jobs.cancel, request.job_id, caller)
        return job_pb2.CancelJobResponse(job=self._job_pb(view))
