"""gRPC edge for API consumers."""

from __future__ import annotations

import grpc

from coordinator import convert
from coordinator.grpc_errors import translate_errors, translate_stream_errors
from coordinator.records import TokenChunk
from coordinator.service import CoordinatorService
from protos.mlxnet.v1 import job_pb2, job_pb2_grpc

CONSUMER_METADATA_KEY = "x-mlxnet-consumer"


class JobServicer(job_pb2_grpc.JobServiceServicer):
    def __init__(self, service: CoordinatorService) -> None:
        self._service = service

    def _consumer(self, context: grpc.ServicerContext) -> str:
        consumer = dict(context.invocation_metadata()).get(CONSUMER_METADATA_KEY, "")
        return consumer[:128] or self._service.config.consumer_default

    @translate_errors
    def SubmitJob(self, request, context):  # noqa: N802 (gRPC names)
        view = self._service.submit_job(convert.submission_from_pb(request, self._consumer(context)))
        return job_pb2.SubmitJobResponse(job=convert.job_to_pb(view))

    @translate_errors
    def GetJob(self, request, context):  # noqa: N802
        return job_pb2.GetJobResponse(job=convert.job_to_pb(self._service.get_job(request.job_id)))

    @translate_stream_errors
    def StreamJob(self, request, context):  # noqa: N802
        for item in self._service.stream_job(request.job_id, context.is_active):
            if isinstance(item, TokenChunk):
                yield job_pb2.StreamJobResponse(first_index=item.first_index,
                                                token_ids=list(item.token_ids), text=item.text)
            else:
                yield job_pb2.StreamJobResponse(final_job=convert.job_to_pb(item))

    @translate_errors
    def ExplainPlacement(self, request, context):  # noqa: N802
        decision = self._service.explain_placement(request.model, request.context_tokens,
                                                   request.min_decode_tokens_per_s)
        return convert.placement_to_pb(decision)

    @translate_errors
    def CancelJob(self, request, context):  # noqa: N802
        return job_pb2.CancelJobResponse(job=convert.job_to_pb(self._service.cancel_job(request.job_id)))
