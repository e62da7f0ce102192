"""gRPC edge for node agents: protobuf in, service calls, protobuf out."""

from __future__ import annotations

import logging
import time

import grpc

from contracts import hop_trace
from contracts.signing import SESSION_METADATA_KEY
from contracts.peer_checks import CheckJob
from contracts.limits import ERROR_CHARS_MAX, shown
from coordinator.errors import CoordinatorError, InvalidRequest
from coordinator.jobs.results import JobTokens
from coordinator.model import NodeRecord, SignedReceipt, SpotChallenge
from coordinator.nodes import registry
from coordinator.nodes.admission import address_of_peer
from coordinator.rpc import convert
from coordinator.rpc.offload import Offload
from coordinator.rpc.status import status_for, translate_errors, translate_stream_errors
from coordinator.rpc.stream_limits import OpenStreams
from coordinator.service import CoordinatorService
from protos.mlxnet.v1 import node_pb2, node_pb2_grpc

log = logging.getLogger(__name__)
Session = tuple[str | None, str]  # (the session token, the connection it came on)


def connection_of(context: grpc.aio.ServicerContext) -> str:
    """The call's connection: the peer's address and port name one TCP connection (and so one
    TLS session) while it is open; grpc-python exposes no TLS session id to bind to instead."""
    return context.peer() or "unknown"


def _session_token(context: grpc.aio.ServicerContext) -> Session:
    """The session token from the call's metadata, and the connection it is used on."""
    metadata = dict(context.invocation_metadata() or ())
    return metadata.get(SESSION_METADATA_KEY), connection_of(context)


class NodeServicer(node_pb2_grpc.NodeServiceServicer):
    """Runs on grpc.aio's event loop; heartbeats have their own pool, so nothing queues them."""

    def __init__(self, service: CoordinatorService, offload: Offload, streams: OpenStreams) -> None:
        self._service = service
        self._offload = offload
        self._streams = streams

    def _node(self, session: Session) -> NodeRecord:
        return self._service.nodes.authenticate(*session)

    @translate_errors
    async def RegisterChallenge(self, request, context):  # noqa: N802 (gRPC names)
        if len(request.public_key) != 32:
            raise InvalidRequest("public_key must be a raw 32-byte Ed25519 key")
        nonce, expires_at_ms = await self._offload.call(self._service.nodes.challenge, request.public_key,
                                                        address_of_peer(context.peer()))
        return node_pb2.RegisterChallengeResponse(nonce=nonce, expires_at_ms=expires_at_ms)

    @translate_errors
    async def Register(self, request, context):  # noqa: N802 (gRPC names)
        registration = convert.registration_from_pb(request)
        node_id, token = await self._offload.call(self._service.nodes.register, registration,
                                                  connection_of(context))
        config = self._service.config
        return node_pb2.RegisterResponse(
            node_id=node_id, session_token=token, heartbeat_interval_ms=config.heartbeat_interval_ms,
            signed_heartbeat_interval_ms=config.node_offline_after_ms // 2)

    @translate_errors
    async def BindSession(self, request, context):  # noqa: N802
        token, connection = _session_token(context)
        await self._offload.call(self._service.nodes.bind, token, connection, request.nonce,
                                 request.signature)
        return node_pb2.BindSessionResponse()

    @translate_errors
    async def Heartbeat(self, request, context):  # noqa: N802
        return node_pb2.HeartbeatResponse(server_time_ms=await self._beat(_session_token(context), request))

    @translate_stream_errors
    async def Heartbeats(self, request_iterator, context):  # noqa: N802
        """Heartbeat's stream form: each message is checked as a Heartbeat call would be (the
        session, its connection), and answered in turn."""
        session = _session_token(context)
        node = await self._offload.call(self._node, session)
        token_sha256 = registry.token_sha256(session[0] or "")  # once: the stream's token is fixed
        with self._streams.hold("Heartbeats", f"node {node.node_id}",
                                self._streams.limits.heartbeat_streams_per_node):
            await context.send_initial_metadata(())  # open: the node may send
            async for message in request_iterator:
                if not message.HasField("heartbeat"):
                    raise InvalidRequest("heartbeat is required in each Heartbeats message")
                response = node_pb2.HeartbeatsResponse()
                response.heartbeat.server_time_ms = await self._beat(session, message.heartbeat, token_sha256)
                yield response

    async def _beat(self, session: Session, request, token_sha256: str | None = None) -> int:  # type: ignore[no-untyped-def]
        if request.running_jobs < 0:
            raise InvalidRequest("running_jobs must not be negative")
        report = convert.heartbeat_report_from_pb(request)
        # Most heartbeats only touch memory: answered here, with no thread hop.
        now = self._service.nodes.heartbeat_in_memory(*session, report, token_sha256)
        if now is None:
            now = await self._offload.heartbeat(self._heartbeat, session, request.running_jobs, report)
        return now

    def _heartbeat(self, session: Session, running_jobs: int, report) -> int:  # type: ignore[no-untyped-def]
        return self._service.nodes.heartbeat(self._node(session), running_jobs, report)

    @translate_stream_errors
    async def ReceiveAssignments(self, request, context):  # noqa: N802
        node = await self._offload.call(self._node, _session_token(context))
        with self._streams.hold("ReceiveAssignments", f"node {node.node_id}",
                                self._streams.limits.assignment_streams_per_node):
            # Headers now, not with the first job: the node knows it is listening.
            await context.send_initial_metadata(())
            async for job in self._offload.drain(self._service.nodes.assignment_steps(node)):
                if isinstance(job, SpotChallenge):
                    yield convert.challenge_to_pb(job)
                    continue
                spec = node.model(job.model_id)
                assert spec is not None, "jobs and checks only go to nodes serving their model"
                if isinstance(job, CheckJob):
                    yield convert.check_assignment_to_pb(job, spec)
                    continue
                pod = await self._offload.step(self._service.nodes.pod_assignment, job)
                yield convert.assignment_to_pb(job, spec, pod)

    @translate_errors
    async def StreamTokens(self, request_iterator, context):  # noqa: N802
        opened_ms = time.time_ns() // 1_000_000
        node = await self._offload.call(self._node, _session_token(context))
        accepted = 0
        with self._streams.hold("StreamTokens", f"node {node.node_id}",
                                self._streams.limits.token_streams_per_node):
            async for request in request_iterator:
                if request.first_index == 0:
                    hop_trace.job_hop(request.job_id, "first chunk read")
                    log.debug("job %s token stream opened at %d, first chunk read at %d",
                              request.job_id, opened_ms, time.time_ns() // 1_000_000)
                if await self._offload.step(self._service.nodes.accept_tokens, node, request.job_id,
                                            convert.token_chunk_from_pb(request),
                                            request.prompt_tokens,
                                            convert.partial_receipt_from_pb(request),
                                            request.attempt):
                    accepted += len(request.token_ids)
        return node_pb2.StreamTokensResponse(tokens_accepted=accepted)

    @translate_stream_errors
    async def StreamNodeTokens(self, request_iterator, context):  # noqa: N802
        """Every job's tokens of one node on one stream: a message's chunks are stored in one
        transaction, and its answer names the jobs refused (they stop; the others go on)."""
        node = await self._offload.call(self._node, _session_token(context))
        with self._streams.hold("StreamNodeTokens", f"node {node.node_id}",
                                self._streams.limits.token_streams_per_node):
            async for request in request_iterator:
                refused = await self._offload.step(self._accept_node_tokens, node, request)
                yield node_pb2.StreamNodeTokensResponse(sequence=request.sequence, refused=refused)

    def _accept_node_tokens(self, node: NodeRecord, request: node_pb2.StreamNodeTokensRequest
                            ) -> list[node_pb2.JobTokensRefused]:
        entries: list[JobTokens] = []
        refused: dict[str, CoordinatorError] = {}
        for chunk in request.chunks:
            if chunk.first_index == 0:
                hop_trace.job_hop(chunk.job_id, "first chunk read")
            if chunk.job_id in refused:
                continue
            try:
                entries.append(convert.job_tokens_from_pb(chunk))
            except CoordinatorError as error:  # this job's chunk is malformed: it alone is refused
                refused[chunk.job_id] = error
        if entries:
            batch = self._service.nodes.accept_token_batch(node, entries)
            refused.update(batch.refused)
        for job_id, error in refused.items():
            log.info("tokens of job %s refused: %s", shown(job_id), shown(str(error), ERROR_CHARS_MAX))
        return [node_pb2.JobTokensRefused(job_id=job_id, code=status_for(error).name,
                                          message=shown(str(error), ERROR_CHARS_MAX))
                for job_id, error in refused.items()]

    @translate_errors
    async def ReportResult(self, request, context):  # noqa: N802
        return await self._offload.call(self._report, _session_token(context), request)

    def _report(self, token: Session, request):  # type: ignore[no-untyped-def]
        node = self._node(token)
        if request.handed_back:
            self._service.nodes.hand_back(node, request.job_id, request.failure_reason or "handed back")
            return node_pb2.ReportResultResponse()
        if request.failure_reason:
            self._service.nodes.accept_failure(node, request.job_id, request.failure_reason,
                                               convert.failure_code_from_pb(request.failure),
                                               convert.partial_receipt_from_pb(request),
                                               request.attempt)
            return node_pb2.ReportResultResponse()
        if not request.HasField("receipt"):
            raise InvalidRequest("ReportResult needs a receipt or a failure_reason")
        result = self._service.nodes.accept_receipt(node, request.job_id, request.receipt.body,
                                                    request.receipt.signature, request.attempt)
        return node_pb2.ReportResultResponse(credited_base_units=result.credited_base_units)

    @translate_errors
    async def ReportPromptCache(self, request, context):  # noqa: N802
        await self._offload.call(self._report_prompt_cache, _session_token(context), request)
        return node_pb2.ReportPromptCacheResponse()

    def _report_prompt_cache(self, token: Session, request) -> None:  # type: ignore[no-untyped-def]
        self._service.nodes.note_cached_prompt(self._node(token), request.job_id, request.cached_prompt_tokens,
                                               request.attempt)

    @translate_errors
    async def ReportCheck(self, request, context):  # noqa: N802
        return await self._offload.call(self._report_check, _session_token(context), request)

    def _report_check(self, token: Session, request):  # type: ignore[no-untyped-def]
        node = self._node(token)
        if not request.check_id or len(request.check_id) > 64:
            raise InvalidRequest("check_id must be 1-64 characters")
        if request.failure_reason:
            accepted = self._service.peers.accept_failure(node, request.check_id, request.failure_reason[:1000])
            return node_pb2.ReportCheckResponse(accepted=accepted)
        if not request.HasField("result"):
            raise InvalidRequest("ReportCheck needs a result or a failure_reason")
        body, signature = convert.check_result_from_pb(request)
        outcome = self._service.peers.accept_result(node, request.check_id, body, signature)
        return node_pb2.ReportCheckResponse(accepted=outcome.accepted)

    @translate_errors
    async def AnswerChallenge(self, request, context):  # noqa: N802
        receipt = (SignedReceipt(request.receipt.body, request.receipt.signature)
                   if request.HasField("receipt") else None)
        problem = await self._offload.call(self._answer, _session_token(context), request.challenge_id,
                                           tuple(request.token_ids), receipt)
        return node_pb2.AnswerChallengeResponse(passed=problem is None, reason=problem or "")

    def _answer(self, token: Session, challenge_id: str,
                token_ids: tuple[int, ...], receipt: SignedReceipt | None) -> str | None:
        return self._service.spot_checks.answer(self._node(token), challenge_id, token_ids, receipt)

    @translate_errors
    async def Leave(self, request, context):  # noqa: N802
        reason = request.reason[:256] or "leaving"
        handed_back = await self._offload.call(self._leave, _session_token(context), reason)
        return node_pb2.LeaveResponse(jobs_handed_back=handed_back)

    def _leave(self, token: Session, reason: str) -> int:
        return self._service.nodes.leave(self._node(token), reason)
