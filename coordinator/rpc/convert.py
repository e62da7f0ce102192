"""Protobuf <-> domain values. The only coordinator module that builds messages."""

from __future__ import annotations

import functools
import json

from contracts import hop_trace
from contracts.benchmarks import BenchmarkResult
from contracts.chat import ChatMessage, ToolCall
from contracts.hardware import ChipTier, HardwareReport, LinkKind, ThunderboltLink
from contracts.ids import NodeId
from contracts.lending import LendingMode, LendingState
from contracts.logprobs import TOP_LOGPROBS_MAX, TokenLogprob, TopLogprob
from contracts.models import ModelSpec
from contracts.peer_checks import CheckJob
from contracts.limits import CHECK_RESULT_BYTES_MAX
from contracts.signing import SIGNATURE_BYTES
from contracts.pods import PodCable, PodDeclaration
from coordinator.errors import InvalidRequest
from coordinator.jobs import answers, chat_options
from coordinator.jobs.results import JobTokens
from coordinator.jobs.submission import Submission
from coordinator.model import (
    ERROR_PROMPT_TOO_LONG, PROMPT_CHAT, JobRecord, JobStatus, SignedReceipt, SpotChallenge, TokenChunk,
)
from coordinator.nodes.registry import Registration
from coordinator.nodes.reports import HeartbeatReport
from coordinator.placement.decision import Placement, Unplaceable
from coordinator.service import JobView
from protos.mlxnet.v1 import common_pb2, job_pb2, node_pb2
from protos.wire import models as model_wire
from protos.wire.models import model_spec_to_pb
from protos.wire.registration import registration_signing_bytes

_STATUS_TO_PB = {
    JobStatus.QUEUED: job_pb2.JOB_STATUS_QUEUED,
    JobStatus.ASSIGNED: job_pb2.JOB_STATUS_ASSIGNED,
    JobStatus.RUNNING: job_pb2.JOB_STATUS_RUNNING,
    JobStatus.COMPLETED: job_pb2.JOB_STATUS_COMPLETED,
    JobStatus.FAILED: job_pb2.JOB_STATUS_FAILED,
}

LENDING_STATES_CACHED = 4096  # distinct terms (a reason each) kept converted


def model_spec_from_pb(message: common_pb2.ModelSpec) -> ModelSpec:
    try:
        return model_wire.model_spec_from_pb(message)
    except AssertionError as error:
        raise InvalidRequest(f"model spec {message.model_id!r} is incomplete: every size field "
                             "must be positive") from error


def hardware_from_pb(message: node_pb2.Hardware) -> HardwareReport:
    try:
        tier = ChipTier(message.chip_tier)
    except ValueError as error:
        raise InvalidRequest(f"chip_tier must be one of {[t.value for t in ChipTier]}") from error
    links = tuple(ThunderboltLink(
        port=link.port, speed_gbps=link.speed_gbps, thunderbolt_version=link.thunderbolt_version,
        peer_model_identifier=link.peer_model_identifier, peer_name=link.peer_name,
        peer_uid=link.peer_uid, peer_rdma_capable=link.peer_rdma_capable,
        local_domain_uuid=link.local_domain_uuid)
        for link in message.thunderbolt_links)
    try:
        return HardwareReport(
            chip=message.chip, chip_family=message.chip_family, chip_tier=tier,
            memory_bytes=message.memory_bytes, gpu_working_set_bytes=message.gpu_working_set_bytes,
            gpu_cores=message.gpu_cores, memory_bandwidth_gb_s=message.memory_bandwidth_gb_s,
            os_name=message.os_name, model_identifier=message.model_identifier,
            thunderbolt_links=links, rdma_enabled=message.rdma_enabled,
            simulated=message.simulated)
    except AssertionError as error:
        raise InvalidRequest("hardware needs positive memory_bytes and a GPU working set no "
                             "larger than memory") from error


def lending_from_pb(message: node_pb2.LendingState) -> LendingState:
    return _lending(message.mode, message.owner_active, message.accepting_jobs, message.reason,
                    message.memory_cap_bytes)


# Every heartbeat carries its node's terms, and a fleet holds few distinct ones: each is converted
# (and checked) once. LendingState is frozen, so heartbeats may share one. Refusals are not cached.
@functools.lru_cache(maxsize=LENDING_STATES_CACHED)
def _lending(mode_value: str, owner_active: bool, accepting_jobs: bool, reason: str,
             memory_cap_bytes: int) -> LendingState:
    try:
        mode = LendingMode(mode_value or LendingMode.IDLE.value)
    except ValueError as error:
        raise InvalidRequest(f"lending mode must be one of {[m.value for m in LendingMode]}") from error
    if memory_cap_bytes < 0:
        raise InvalidRequest("memory_cap_bytes must be 0 (no cap) or positive")
    return LendingState(mode=mode, owner_active=owner_active, accepting_jobs=accepting_jobs,
                        reason=reason[:256], memory_cap_bytes=memory_cap_bytes or None)


def benchmark_from_pb(message: node_pb2.Benchmark) -> BenchmarkResult:
    try:
        return BenchmarkResult(
            memory_bandwidth_gb_s=message.memory_bandwidth_gb_s,
            decode_tokens_per_s=message.decode_tokens_per_s,
            prefill_tokens_per_s=message.prefill_tokens_per_s,
            reference_model=message.reference_model,
            reference_weights_bytes=message.reference_weights_bytes,
            measured_at_ms=message.measured_at_ms, run_time_ms=message.run_time_ms,
            batch_decode_tokens_per_s=tuple((point.batch_size, point.tokens_per_s) for point in message.batch_decode))
    except AssertionError as error:
        raise InvalidRequest("benchmark needs positive bandwidth, tokens/s, reference weight "
                             "bytes and times, a reference model name under 256 "
                             "characters, and batch_decode sizes ascending with positive tokens/s") from error


def pod_from_pb(message: node_pb2.PodDeclaration) -> PodDeclaration:
    try:
        cables = tuple(PodCable(NodeId(link.a), NodeId(link.b), LinkKind(link.kind),
                                link.cables or 1) for link in message.links)
    except (ValueError, AssertionError) as error:
        raise InvalidRequest(f"pod links need two different members, a kind among "
                             f"{[k.value for k in LinkKind]} and cables >= 1") from error
    members = tuple(NodeId(m) for m in message.member_node_ids)
    return PodDeclaration(pod_id=message.pod_id, leader=members[0] if members else NodeId(""),
                          members=members, cables=cables)


def heartbeat_report_from_pb(request: node_pb2.HeartbeatRequest) -> HeartbeatReport:
    return HeartbeatReport(
        running_jobs=request.running_jobs, sent_at_ms=request.sent_at_ms,
        lending=lending_from_pb(request.lending) if request.HasField("lending") else None,
        warm_models=tuple(request.warm_models),
        benchmark=benchmark_from_pb(request.benchmark) if request.HasField("benchmark") else None,
        signature=request.signature)


def registration_from_pb(request: node_pb2.RegisterRequest) -> Registration:
    return Registration(
        public_key=request.public_key, signature=request.signature,
        timestamp_ms=request.timestamp_ms, hardware=hardware_from_pb(request.hardware),
        models=tuple(model_spec_from_pb(m) for m in request.models),
        operator_id=request.operator_id, display_name=request.display_name,
        max_concurrent_jobs=request.max_concurrent_jobs or 1,
        lending=lending_from_pb(request.lending) if request.HasField("lending") else LendingState(),
        benchmark=benchmark_from_pb(request.benchmark) if request.HasField("benchmark") else None,
        warm_models=tuple(request.warm_models),
        pod=pod_from_pb(request.pod) if request.HasField("pod") else None,
        signed_message=registration_signing_bytes(request), nonce=request.nonce,
        operator_key=request.operator_key,
        region=request.region)


def _chat_message(message: common_pb2.ChatMessage) -> ChatMessage:
    calls = tuple(ToolCall(c.id, c.name, c.arguments_json) for c in message.tool_calls)
    return ChatMessage(message.role, message.content, calls, message.tool_call_id)


def submission_from_pb(request: job_pb2.SubmitJobRequest, consumer_id: str,
                       api_key_id: str | None = None) -> Submission:
    sampling = request.sampling
    if request.top_logprobs and not request.logprobs:
        raise InvalidRequest("top_logprobs needs logprobs set", param="top_logprobs")
    tools = chat_options.chat_tools(
        tuple(chat_options.FunctionTool(t.name, t.description, t.parameters_json) for t in request.tools),
        request.tool_choice, request.tool_choice_function,
        request.parallel_tool_calls if request.HasField("parallel_tool_calls") else None)
    options = chat_options.chat_options(request.response_format_json, request.chat_template_kwargs_json)
    if not request.messages and (tools.definitions or options != chat_options.NO_OPTIONS):
        raise InvalidRequest("tools, response_format_json and chat_template_kwargs_json need a "
                             "chat job: send messages, not a prompt", param="messages")
    return Submission(
        consumer_id=consumer_id, model_id=request.model, prompt=request.prompt,
        max_tokens=sampling.max_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
        seed=sampling.seed, request_id=request.request_id,
        min_decode_tokens_per_s=request.min_decode_tokens_per_s,
        messages=tuple(_chat_message(m) for m in request.messages),
        stop=tuple(request.stop), top_logprobs=request.top_logprobs if request.logprobs else -1,
        api_key_id=api_key_id, tools=tools, options=options)


def sampling_to_pb(job: JobRecord) -> common_pb2.SamplingParams:
    return common_pb2.SamplingParams(max_tokens=job.max_tokens, temperature=job.temperature,
                                     top_p=job.top_p, seed=job.seed)


def assignment_to_pb(job: JobRecord, spec: ModelSpec,
                     pod: tuple[PodDeclaration, tuple[int, ...]] | None = None,
                     ) -> node_pb2.ReceiveAssignmentsResponse:
    message = node_pb2.ReceiveAssignmentsResponse(
        job_id=job.job_id, model=model_spec_to_pb(spec), prompt=job.prompt,
        sampling=sampling_to_pb(job), context_tokens=job.context_tokens,
        strategy=job.strategy or "single", pod_node_ids=list(job.node_ids),
        layer_split=list(job.layer_split), logprobs=job.top_logprobs >= 0,
        top_logprobs=max(0, job.top_logprobs), attempt=job.attempt,
        traceparent=hop_trace.traceparent(job.job_id))
    if pod is not None:  # members and their layers in the pod's rank order
        declaration, layers = pod
        del message.pod_node_ids[:], message.layer_split[:]
        message.pod_node_ids.extend(declaration.members)
        message.layer_split.extend(layers)
        message.pod_id, message.pod_leader_node_id = declaration.pod_id, declaration.leader
    return message


def check_assignment_to_pb(check: CheckJob, spec: ModelSpec) -> node_pb2.ReceiveAssignmentsResponse:
    """A check job in the assignment stream: the checked job's prompt, sampling and claimed output."""
    return node_pb2.ReceiveAssignmentsResponse(
        job_id=check.check_id, model=model_spec_to_pb(spec), prompt=check.prompt,
        sampling=common_pb2.SamplingParams(max_tokens=0, temperature=check.temperature,
                                           top_p=check.top_p, seed=check.seed),
        strategy="single",
        check=node_pb2.PeerCheckJob(checked_job_id=check.job_id, output_ids=list(check.output_ids),
                                    finish_reason=int(check.finish_reason),
                                    logit_slack=check.slack.logit_slack, mass_slack=check.slack.mass_slack))


def check_result_from_pb(request: node_pb2.ReportCheckRequest) -> tuple[bytes, bytes]:
    """(body, signature) of a check's signed result, bounded before anything reads it."""
    body, signature = request.result.body, request.result.signature
    if len(body) > CHECK_RESULT_BYTES_MAX:
        raise InvalidRequest(f"result.body is {len(body)} bytes; at most {CHECK_RESULT_BYTES_MAX}")
    if len(signature) != SIGNATURE_BYTES:
        raise InvalidRequest(f"result.signature must be {SIGNATURE_BYTES} bytes")
    return body, signature


def partial_receipt_from_pb(
        request: node_pb2.StreamTokensRequest | node_pb2.ReportResultRequest) -> SignedReceipt | None:
    """The partial receipt a chunk or a failure carries, if any."""
    if not request.HasField("partial_receipt"):
        return None
    return SignedReceipt(request.partial_receipt.body, request.partial_receipt.signature)


def token_chunk_from_pb(request: node_pb2.StreamTokensRequest) -> TokenChunk:
    if any(len(entry.top) > TOP_LOGPROBS_MAX for entry in request.logprobs):
        raise InvalidRequest(f"a token's top logprobs hold at most {TOP_LOGPROBS_MAX} entries")
    return TokenChunk(request.first_index, tuple(request.token_ids), request.text,
                      tuple(logprob_from_pb(entry) for entry in request.logprobs))


def job_tokens_from_pb(request: node_pb2.StreamTokensRequest) -> JobTokens:
    """One job's chunk of a multiplexed message (StreamNodeTokens)."""
    return JobTokens(request.job_id, token_chunk_from_pb(request), request.prompt_tokens,
                     partial_receipt_from_pb(request), request.attempt, request.cached_prompt_tokens)


def logprob_from_pb(entry: common_pb2.TokenLogprob) -> TokenLogprob:
    return TokenLogprob(entry.logprob, tuple(TopLogprob(t.token_id, t.text, t.logprob)
                                             for t in entry.top), entry.text)


def logprob_to_pb(entry: TokenLogprob) -> common_pb2.TokenLogprob:
    return common_pb2.TokenLogprob(logprob=entry.logprob, text=entry.text, top=[
        common_pb2.TopLogprob(token_id=t.token_id, text=t.text, logprob=t.logprob)
        for t in entry.top])


def failure_code_from_pb(failure: int) -> str | None:
    return ERROR_PROMPT_TOO_LONG if failure == node_pb2.JOB_FAILURE_PROMPT_TOO_LONG else None


def _answer_to_pb(job_id: str, answer: answers.ChatAnswer) -> job_pb2.ChatAnswer:
    return job_pb2.ChatAnswer(content=answer.content, reasoning=answer.reasoning, tool_calls=[
        common_pb2.ChatToolCall(id=answers.call_id(job_id, index), name=call.name,
                                arguments_json=call.arguments)
        for index, call in enumerate(answer.calls)])


def job_to_pb(view: JobView, chat_features: tuple[str, ...] = ()) -> job_pb2.Job:
    """chat_features: the model's, to read a completed chat job's reasoning apart."""
    job = view.job
    message = job_pb2.Job(
        job_id=job.job_id, status=_STATUS_TO_PB[job.status], model=job.model_id,
        node_ids=list(job.node_ids), strategy=job.strategy or "",
        placement_explanation_json=job.explanation_json or "", prompt_tokens=job.prompt_tokens,
        completion_tokens=job.completion_tokens, text=view.text,
        receipt_verified=job.receipt_verified, credited_base_units=job.credited_base_units,
        error=job.error or "", created_at_ms=job.created_at_ms,
        finished_at_ms=job.finished_at_ms or 0, queue_position=view.queue_position,
        chips=list(view.chips), signer_public_key=view.signer_public_key,
        error_code=job.error_code or "", reserved_base_units=job.reserved_base_units,
        prompt_format=job.prompt_format)
    if job.receipt_body is not None and job.receipt_signature is not None:
        message.receipt.CopyFrom(common_pb2.SignedReceipt(body=job.receipt_body,
                                                          signature=job.receipt_signature))
    if job.status is JobStatus.COMPLETED and job.prompt_format == PROMPT_CHAT:
        answer = answers.chat_answer(job.prompt, view.text, chat_features)
        if answer is not None:
            message.answer.CopyFrom(_answer_to_pb(job.job_id, answer))
    return message


def placement_to_pb(decision: Placement | Unplaceable) -> job_pb2.ExplainPlacementResponse:
    explanation = decision.explanation
    message = job_pb2.ExplainPlacementResponse(
        explanation_json=json.dumps(explanation.to_dict()), explanation_text=explanation.render())
    if isinstance(decision, Unplaceable):
        message.placeable = False
        message.permanent = decision.permanent
        message.reason = decision.reason
        return message
    message.placeable = True
    message.node_ids.extend(decision.node_ids)
    message.strategy = str(decision.strategy)
    message.layer_split.extend(decision.layer_split)
    message.predicted_decode_tokens_per_s = decision.predicted_decode_tokens_per_s
    message.predicted_time_to_first_token_s = decision.predicted_time_to_first_token_s
    return message


def challenge_to_pb(challenge: SpotChallenge) -> node_pb2.ReceiveAssignmentsResponse:
    return node_pb2.ReceiveAssignmentsResponse(challenge=node_pb2.BenchmarkChallenge(
        challenge_id=challenge.challenge_id, prompt=challenge.prompt, seed=challenge.seed,
        decode_tokens=challenge.decode_tokens))
