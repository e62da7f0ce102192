"""gRPC edge for API consumers.

Every call names its caller with an API key in the `authorization` metadata entry
(`Bearer mlxk_...`); without one it is anonymous, allowed only when the coordinator
runs with anonymous access. A consumer sees only its own jobs.
"""

from __future__ import annotations

import grpc

from coordinator.errors import AlreadyDone
from coordinator.jobs.stops import StopScanner
from coordinator.model import ERROR_STOP_SEQUENCE, TokenChunk
from coordinator.money.api_keys import Caller
from coordinator.rpc import convert
from coordinator.rpc.status import translate_errors, translate_stream_errors
from coordinator.service import CoordinatorService
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


class JobServicer(job_pb2_grpc.JobServiceServicer):
    def __init__(self, service: CoordinatorService) -> None:
        self._service = service

    def _caller(self, context: grpc.ServicerContext) -> Caller:
        metadata = dict(context.invocation_metadata())
        return self._service.authenticate_consumer(
            bearer_key(metadata.get(AUTHORIZATION_METADATA_KEY)),
            metadata.get(CONSUMER_METADATA_KEY, ""))

    @translate_errors
    def SubmitJob(self, request, context):  # noqa: N802 (gRPC names)
        caller = self._caller(context)
        submission = convert.submission_from_pb(
            request, caller.consumer_id, caller.key.key_id if caller.key else None)
        view = self._service.submit_job(submission, caller, place_now=request.no_queue)
        return job_pb2.SubmitJobResponse(job=convert.job_to_pb(view))

    @translate_errors
    def GetJob(self, request, context):  # noqa: N802
        view = self._service.get_job(request.job_id, self._caller(context))
        return job_pb2.GetJobResponse(job=convert.job_to_pb(view))

    @translate_stream_errors
    def StreamJob(self, request, context):  # noqa: N802
        """Every token; the text cut before the job's first stop sequence, which ends the job."""
        caller = self._caller(context)
        scanner = StopScanner(self._service.get_job(request.job_id, caller).job.stop)
        next_index = 0
        for item in self._service.stream_job(request.job_id, context.is_active, caller):
            if isinstance(item, TokenChunk):
                next_index = item.first_index + len(item.token_ids)
                stopped = scanner.stopped
                text = scanner.feed(item.text)
                yield job_pb2.StreamJobResponse(
                    first_index=item.first_index, token_ids=list(item.token_ids), text=text,
                    logprobs=[convert.logprob_to_pb(entry) for entry in item.logprobs])
                if scanner.stopped and not stopped:
                    self._end_at_stop(request.job_id, caller)
            else:
                if rest := scanner.flush():  # text held back in case a stop sequence followed
                    yield job_pb2.StreamJobResponse(first_index=next_index, text=rest)
                yield job_pb2.StreamJobResponse(final_job=convert.job_to_pb(item))

    def _end_at_stop(self, job_id: str, caller: Caller) -> None:
        try:
            self._service.cancel_job(job_id, caller, code=ERROR_STOP_SEQUENCE)
        except AlreadyDone:
            pass  # it ended on its own meanwhile

    @translate_errors
    def ExplainPlacement(self, request, context):  # noqa: N802
        self._caller(context)
        decision = self._service.explain_placement(request.model, request.context_tokens,
                                                   request.min_decode_tokens_per_s)
        return convert.placement_to_pb(decision)

    @translate_errors
    def CancelJob(self, request, context):  # noqa: N802
        view = self._service.cancel_job(request.job_id, self._caller(context))
        return job_pb2.CancelJobResponse(job=convert.job_to_pb(view))
