"""gRPC edge for node agents: protobuf in, service calls, protobuf out."""

from __future__ import annotations

import logging
import time

import grpc

from contracts import hop_trace
from coordinator.errors import InvalidRequest
from coordinator.model import NodeRecord
from coordinator.nodes.admission import address_of_peer
from coordinator.rpc import convert
from coordinator.rpc.status import translate_errors, translate_stream_errors
from coordinator.service import CoordinatorService
from protos.mlxnet.v1 import node_pb2, node_pb2_grpc

SESSION_METADATA_KEY = "x-mlxnet-session"
log = logging.getLogger(__name__)


def _session_token(context: grpc.ServicerContext) -> str | None:
    return dict(context.invocation_metadata()).get(SESSION_METADATA_KEY)


class NodeServicer(node_pb2_grpc.NodeServiceServicer):
    def __init__(self, service: CoordinatorService) -> None:
        self._service = service

    def _node(self, context: grpc.ServicerContext) -> NodeRecord:
        return self._service.nodes.authenticate(_session_token(context))

    @translate_errors
    def RegisterChallenge(self, request, context):  # noqa: N802 (gRPC names)
        if len(request.public_key) != 32:
            raise InvalidRequest("public_key must be a raw 32-byte Ed25519 key")
        nonce, expires_at_ms = self._service.nodes.challenge(request.public_key,
                                                             address_of_peer(context.peer()))
        return node_pb2.RegisterChallengeResponse(nonce=nonce, expires_at_ms=expires_at_ms)

    @translate_errors
    def Register(self, request, context):  # noqa: N802
        node_id, token = self._service.nodes.register(convert.registration_from_pb(request))
        return node_pb2.RegisterResponse(
            node_id=node_id, session_token=token,
            heartbeat_interval_ms=self._service.config.heartbeat_interval_ms)

    @translate_errors
    def Heartbeat(self, request, context):  # noqa: N802
        if request.running_jobs < 0:
            raise InvalidRequest("running_jobs must not be negative")
        now = self._service.nodes.heartbeat(self._node(context), request.running_jobs,
                                      convert.heartbeat_report_from_pb(request))
        return node_pb2.HeartbeatResponse(server_time_ms=now)

    @translate_stream_errors
    def ReceiveAssignments(self, request, context):  # noqa: N802
        node = self._node(context)
        for job in self._service.nodes.assignments(node, context.is_active):
            spec = node.model(job.model_id)
            assert spec is not None, "jobs are only placed on nodes serving their model"
            yield convert.assignment_to_pb(job, spec, self._service.nodes.pod_assignment(job))

    @translate_errors
    def StreamTokens(self, request_iterator, context):  # noqa: N802
        opened_ms = time.time_ns() // 1_000_000
        node = self._node(context)
        accepted = 0
        for request in request_iterator:
            if request.first_index == 0:
                hop_trace.job_hop(request.job_id, "first chunk read")
                log.debug("job %s token stream opened at %d, first chunk read at %d",
                          request.job_id, opened_ms, time.time_ns() // 1_000_000)
            if self._service.nodes.accept_tokens(node, request.job_id, convert.token_chunk_from_pb(request),
                                           request.prompt_tokens):
                accepted += len(request.token_ids)
        return node_pb2.StreamTokensResponse(tokens_accepted=accepted)

    @translate_errors
    def ReportResult(self, request, context):  # noqa: N802
        node = self._node(context)
        if request.handed_back:
            self._service.nodes.hand_back(node, request.job_id, request.failure_reason or "handed back")
            return node_pb2.ReportResultResponse()
        if request.failure_reason:
            self._service.nodes.accept_failure(node, request.job_id, request.failure_reason,
                                         convert.failure_code_from_pb(request.failure))
            return node_pb2.ReportResultResponse()
        if not request.HasField("receipt"):
            raise InvalidRequest("ReportResult needs a receipt or a failure_reason")
        result = self._service.nodes.accept_receipt(node, request.job_id, request.receipt.body,
                                              request.receipt.signature)
        return node_pb2.ReportResultResponse(credited_base_units=result.credited_base_units)

    @translate_errors
    def Leave(self, request, context):  # noqa: N802
        handed_back = self._service.nodes.leave(self._node(context), request.reason[:256] or "leaving")
        return node_pb2.LeaveResponse(jobs_handed_back=handed_back)
