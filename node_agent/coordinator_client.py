"""The node agent's gRPC edge: the only agent module that touches protobuf or grpc.

gRPC failures are translated here, once:

    CoordinatorCallError
    ├── CoordinatorUnavailable   retry later (network, restart, deadline)
    ├── SessionExpired           register again
    ├── CallRejected             the coordinator refused; retrying the same call won't help
    └── CoordinatorUntrusted     its certificate is not the trusted one: stop, loudly

A session works only on connections it is bound to (the one it registered on, or one where
the node signed the coordinator's bind nonce). A call on any other connection (a new channel,
a reconnect after a coordinator restart, another coordinator) answers UNAUTHENTICATED with a
nonce: the client signs it in BindSession and retries, so callers never see it.

The channel is TLS (protos.wire.channel), opened at the first call: the certificate is then
checked against the pin, the system's CAs, or (a node's first join) trusted on first use
and reported through on_first_use so the agent remembers it.

Given several coordinators (they share one database: contracts/failover.py), the client holds
one channel at a time; fail_over() moves it to the next address. The session, and each job's
attempt, stay valid there: sessions live in the shared database.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import grpc

from contracts.benchmarks import BenchmarkResult
from contracts.hardware import HardwareReport
from contracts.logprobs import TokenLogprob
from contracts.lending import Heartbeat, LendingState, heartbeat_message
from contracts.failover import Rotation, after_failure, after_success, parse_addresses
from contracts.models import ModelSpec
from contracts.peer_checks import CheckJob
from contracts.receipts import FinishReason
from contracts.token_checks import TokenSlack
from contracts.pods import PodDeclaration
from contracts.signing import BIND_NONCE_METADATA_KEY, SESSION_METADATA_KEY, session_bind_message
from contracts.tls import CoordinatorTrust, TransportRefused, decide
from node_agent.identity import Identity
from protos.mlxnet.v1 import common_pb2, node_pb2, node_pb2_grpc
from protos.wire.channel import open_channel
from protos.wire.models import model_spec_to_pb
from protos.wire.registration import registration_signing_bytes

log = logging.getLogger(__name__)
RPC_DEADLINE_S = 15.0
RETIRED_CHANNELS_MAX = 8  # channels of coordinators failed over from, closed once older
ATTEMPTS_KEPT_MAX = 4_096  # jobs whose attempt the client remembers, oldest forgotten first
_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
              grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
              grpc.StatusCode.RESOURCE_EXHAUSTED}


class CoordinatorCallError(Exception):
    pass


class CoordinatorUnavailable(CoordinatorCallError):
    pass


class SessionExpired(CoordinatorCallError):
    pass


class CallRejected(CoordinatorCallError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class CoordinatorUntrusted(CoordinatorCallError):
    """Plaintext off loopback, a certificate no CA or pin vouches for, or a changed one."""


def bind_nonce(error: grpc.RpcError) -> bytes | None:
    """The nonce of an UNAUTHENTICATED answer to a session not bound to the call's connection."""
    if error.code() is not grpc.StatusCode.UNAUTHENTICATED:
        return None
    for key, value in error.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == BIND_NONCE_METADATA_KEY and isinstance(value, bytes):
            return value
    return None


def bind_session(stub: node_pb2_grpc.NodeServiceStub, identity: Identity, token: str,
                 nonce: bytes = b"") -> None:
    """Bind the session to the stub's connection: sign the nonce (asked for first when none is
    given) and send it. Raises grpc.RpcError when the coordinator refuses."""
    metadata = ((SESSION_METADATA_KEY, token),)
    attempts = 3  # ask for a nonce, sign it; once more should it have lapsed (or the connection changed)
    for attempt in range(attempts):
        try:
            stub.BindSession(node_pb2.BindSessionRequest(
                nonce=nonce, signature=identity.sign(session_bind_message(nonce, token)) if nonce else b""),
                timeout=RPC_DEADLINE_S, metadata=metadata)
            return
        except grpc.RpcError as error:
            fresh = bind_nonce(error)
            if fresh is None or attempt == attempts - 1:
                raise  # refused, or a new nonce each time: the caller's error path, not a crash
            nonce = fresh


class _HeartbeatStream:
    """One open Heartbeats call: heartbeats go in through a queue, and each waits for its answer
    (cancelled after timeout_s, as a unary call's deadline would)."""

    def __init__(self, stub: node_pb2_grpc.NodeServiceStub, metadata: tuple[tuple[str, str], ...]) -> None:
        self.stub = stub
        self._requests: queue.Queue[node_pb2.HeartbeatsRequest | None] = queue.Queue()
        self._call = stub.Heartbeats(iter(self._requests.get, None), metadata=metadata)

    def beat(self, request: node_pb2.HeartbeatRequest, timeout_s: float) -> None:
        self._requests.put(node_pb2.HeartbeatsRequest(heartbeat=request))
        timer = threading.Timer(timeout_s, self._call.cancel)
        timer.daemon = True
        timer.start()
        try:
            next(self._call)
        except StopIteration as ended:
            raise CoordinatorUnavailable("the coordinator ended the heartbeat stream") from ended
        finally:
            timer.cancel()

    def ended(self) -> bool:
        """The call is over (the coordinator stopped, the connection broke): open another."""
        return self._call.done()

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class _Recorded(Iterator[node_pb2.StreamTokensRequest]):
    """A token stream's requests, keeping the first ones gRPC takes: a stream refused at its
    start (a connection to bind) is sent again from them."""

    KEPT_MAX = 256

    def __init__(self, requests: Iterator[node_pb2.StreamTokensRequest]) -> None:
        self._requests = requests
        self.taken: list[node_pb2.StreamTokensRequest] = []
        self.overflowed = False

    def __next__(self) -> node_pb2.StreamTokensRequest:
        request = next(self._requests)
        if len(self.taken) < self.KEPT_MAX:
            self.taken.append(request)
        else:
            self.overflowed = True
        return request


def _translate(error: grpc.RpcError) -> CoordinatorCallError:
    code = error.code()
    details = error.details() or ""
    if code in _RETRYABLE:
        return CoordinatorUnavailable(f"{code.name}: {details}")
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return SessionExpired(details)
    return CallRejected(code.name, details)


@dataclass(frozen=True)
class Assignment:
    job_id: str
    model: ModelSpec
    prompt: str
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    strategy: str = "single"  # single, tensor or pipeline
    pod_id: str = ""
    pod_leader_node_id: str = ""
    pod_node_ids: tuple[str, ...] = ()  # rank order, the leader first
    layer_split: tuple[int, ...] = ()  # layers per member, aligned with pod_node_ids
    top_logprobs: int = -1  # -1: no logprobs; k >= 0: send each token's, and the k likeliest
    traceparent: str = ""  # the job's W3C trace context from the coordinator, when it traces


@dataclass(frozen=True)
class Challenge:
    """A challenge benchmark from the coordinator: decode on the reference model, answer at once."""

    challenge_id: str
    prompt: str
    seed: int
    decode_tokens: int


@dataclass(frozen=True)
class Chunk:
    """Consecutive generated tokens, as one StreamTokens message."""

    first_index: int
    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token, or none
    prompt_tokens: int = 0  # on the job's first chunk
    # A signed partial receipt (body, signature) over the job's tokens so far, none or the latest.
    partial_receipt: tuple[bytes, bytes] | None = None

    def merged(self, following: Chunk) -> Chunk:
        return Chunk(self.first_index, self.token_ids + following.token_ids,
                     self.text + following.text, self.logprobs + following.logprobs,
                     self.prompt_tokens, following.partial_receipt or self.partial_receipt)


def _check_job(message: node_pb2.ReceiveAssignmentsResponse, spec: ModelSpec) -> CheckJob | None:
    """The check job, or None (logged) when it is malformed: it lapses and goes to another peer."""
    check = message.check
    if check.finish_reason not in {int(reason) for reason in FinishReason} or not (
            check.logit_slack >= 0 and check.mass_slack >= 0):
        log.warning("check job %s is malformed (finish reason %d); not run", message.job_id[:64],
                    check.finish_reason)
        return None
    return CheckJob(message.job_id, check.checked_job_id, spec.model_id, spec.weights_digest,
                    message.prompt, tuple(check.output_ids), FinishReason(check.finish_reason),
                    message.sampling.temperature, message.sampling.top_p, message.sampling.seed,
                    TokenSlack(check.logit_slack, check.mass_slack))


def _logprob_pb(entry: TokenLogprob) -> common_pb2.TokenLogprob:
    return common_pb2.TokenLogprob(logprob=entry.logprob, text=entry.text, top=[
        common_pb2.TopLogprob(token_id=t.token_id, text=t.text, logprob=t.logprob)
        for t in entry.top])


def _hardware_pb(hardware: HardwareReport) -> node_pb2.Hardware:
    return node_pb2.Hardware(
        chip=hardware.chip, chip_family=hardware.chip_family, chip_tier=hardware.chip_tier.value,
        memory_bytes=hardware.memory_bytes, gpu_working_set_bytes=hardware.gpu_working_set_bytes,
        gpu_cores=hardware.gpu_cores, memory_bandwidth_gb_s=hardware.memory_bandwidth_gb_s,
        os_name=hardware.os_name, model_identifier=hardware.model_identifier,
        rdma_enabled=hardware.rdma_enabled, simulated=hardware.simulated,
        thunderbolt_links=[node_pb2.ThunderboltLink(
            port=link.port, speed_gbps=link.speed_gbps,
            thunderbolt_version=link.thunderbolt_version,
            peer_model_identifier=link.peer_model_identifier, peer_name=link.peer_name,
            peer_uid=link.peer_uid, peer_rdma_capable=link.peer_rdma_capable,
            local_domain_uuid=link.local_domain_uuid)
            for link in hardware.thunderbolt_links])


def _lending_pb(lending: LendingState) -> node_pb2.LendingState:
    return node_pb2.LendingState(
        mode=lending.mode.value, owner_active=lending.owner_active,
        accepting_jobs=lending.accepting_jobs, reason=lending.reason,
        memory_cap_bytes=lending.memory_cap_bytes or 0)


def _benchmark_pb(result: BenchmarkResult) -> node_pb2.Benchmark:
    return node_pb2.Benchmark(
        memory_bandwidth_gb_s=result.memory_bandwidth_gb_s,
        decode_tokens_per_s=result.decode_tokens_per_s,
        prefill_tokens_per_s=result.prefill_tokens_per_s, reference_model=result.reference_model,
        reference_weights_bytes=result.reference_weights_bytes,
        measured_at_ms=result.measured_at_ms, run_time_ms=result.run_time_ms,
        batch_decode=[node_pb2.BatchDecode(batch_size=size, tokens_per_s=rate)
                      for size, rate in result.batch_decode_tokens_per_s])


def _pod_pb(pod: PodDeclaration) -> node_pb2.PodDeclaration:
    return node_pb2.PodDeclaration(
        pod_id=pod.pod_id, member_node_ids=list(pod.members),
        links=[node_pb2.PodLink(a=c.a, b=c.b, kind=c.kind.value, cables=c.cables)
               for c in pod.cables])


@dataclass(frozen=True)
class NodeStatus:
    """What the node tells the coordinator about itself, at Register and in each heartbeat."""

    lending: LendingState = LendingState()
    warm_models: tuple[str, ...] = ()
    benchmark: BenchmarkResult | None = None  # a fresh one, sent once


def register_request(identity: Identity, nonce: bytes, hardware: HardwareReport,
                     models: tuple[ModelSpec, ...], operator_id: str, display_name: str,
                     max_concurrent_jobs: int, status: NodeStatus | None = None,
                     pod: PodDeclaration | None = None, operator_key: str = "",
                     region: str = "") -> node_pb2.RegisterRequest:
    """A RegisterRequest for the coordinator's nonce, signed over all of it."""
    request = node_pb2.RegisterRequest(
        public_key=identity.public_key_raw, timestamp_ms=time.time_ns() // 1_000_000,
        hardware=_hardware_pb(hardware), models=[model_spec_to_pb(m) for m in models],
        operator_id=operator_id, display_name=display_name,
        max_concurrent_jobs=max_concurrent_jobs, agent_version="0.1.0", nonce=nonce,
        operator_key=operator_key, region=region)
    if status is not None:
        request.lending.CopyFrom(_lending_pb(status.lending))
        request.warm_models.extend(status.warm_models)
        if status.benchmark is not None:
            request.benchmark.CopyFrom(_benchmark_pb(status.benchmark))
    if pod is not None:
        request.pod.CopyFrom(_pod_pb(pod))
    request.signature = identity.sign(registration_signing_bytes(request))
    return request


class CoordinatorClient:
    def __init__(self, address: str, trust: CoordinatorTrust = CoordinatorTrust(),
                 on_first_use: Callable[[str, str], None] | None = None,
                 trust_by_address: Mapping[str, CoordinatorTrust] | None = None,
                 start_at: int = 0) -> None:
        """address: HOST:PORT, or several separated by commas (tried in turn from start_at).

        trust applies to every address not in trust_by_address (a pin per coordinator).
        on_first_use(address, fingerprint): a certificate was trusted on first use; remember it.
        """
        self._rotation = Rotation(parse_addresses(address)).starting_at(start_at)
        self._trusts = {a: (trust_by_address or {}).get(a, trust) for a in self._rotation.addresses}
        self._on_first_use = on_first_use
        self._draws = random.Random()
        self._retired: list[grpc.Channel] = []  # channels left behind by fail_over()
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub_value: node_pb2_grpc.NodeServiceStub | None = None
        self._closed = False
        self._session = ""
        self._attempts: dict[str, int] = {}  # job id -> the attempt last assigned here
        self._models: dict[str, ModelSpec] = {}
        self._identity: Identity | None = None
        self._last_sent_ms = 0
        self._signed_heartbeat_interval_ms = 0  # 0: sign every heartbeat (an older coordinator)
        self._last_signed = (0, "")  # (sent at, lending mode) of the last signed heartbeat
        self._heartbeat_stream: _HeartbeatStream | None = None
        self._heartbeat_lock = threading.Lock()
        self._stream_heartbeats = True  # False once a coordinator answered Heartbeats UNIMPLEMENTED

    @property
    def trust(self) -> CoordinatorTrust:
        """How the current coordinator's certificate is checked."""
        return self._trusts[self._address]

    @property
    def _address(self) -> str:
        return self._rotation.address

    @property
    def address(self) -> str:
        """The coordinator this client talks to now."""
        return self._rotation.address

    @property
    def addresses(self) -> tuple[str, ...]:
        return self._rotation.addresses

    def fail_over(self) -> float:
        """The current coordinator failed: close its channel and take the next address.

        Returns the seconds to wait before trying it (contracts.failover: a jitter within a
        round, the backoff once every address failed in a row). Calls in flight on the old
        channel end as CoordinatorUnavailable; reports retry them on the new one.
        """
        with self._lock:
            self._rotation, wait_s = after_failure(self._rotation, self._draws.random())
            if len(self._rotation.addresses) > 1 and self._channel is not None:
                # Not closed now: another thread may be starting a call on it (a closed
                # channel raises ValueError, not a gRPC error); its calls fail as UNAVAILABLE.
                self._retired = [*self._retired[-(RETIRED_CHANNELS_MAX - 1):], self._channel]
                self._channel, self._stub_value = None, None
            return wait_s

    def connected(self) -> None:
        """The connection held (a stream stayed open): the next failure starts a new round."""
        with self._lock:
            self._rotation = after_success(self._rotation)

    @property
    def session_token(self) -> str:
        """The session's token since register() ("" before), sent as x-mlxnet-session."""
        return self._session

    @property
    def _stub(self) -> node_pb2_grpc.NodeServiceStub:
        with self._lock:
            if self._closed:
                raise CoordinatorUnavailable("the client is closed")
            if self._stub_value is None:
                self._open()
            assert self._stub_value is not None
            return self._stub_value

    def _open(self) -> None:
        address = self._address
        try:
            channel, decision = open_channel(address, self._trusts[address])
        except TransportRefused as error:
            raise CoordinatorUntrusted(str(error)) from error
        except (OSError, ValueError) as error:
            raise CoordinatorUnavailable(f"cannot reach {address}: {error}") from error
        if decision.basis == "first use":
            log.warning("trusting the coordinator at %s on first use: certificate fingerprint "
                        "%s; from now on only this certificate is accepted", address,
                        decision.fingerprint)
            self._trusts[address] = dataclasses.replace(
                self._trusts[address], fingerprint=decision.fingerprint, trust_on_first_use=False)
            if self._on_first_use is not None:
                self._on_first_use(address, decision.fingerprint)
        self._channel = channel
        self._stub_value = node_pb2_grpc.NodeServiceStub(channel)

    def check_trust(self) -> None:
        """Raises CoordinatorUntrusted when the coordinator now shows a certificate not trusted.

        For after a broken connection: a channel pinned to the old certificate only says
        UNAVAILABLE, and this says why. An unreachable coordinator has nothing to check yet.
        """
        address = self._address
        try:
            decide(address, self._trusts[address])
        except TransportRefused as error:
            raise CoordinatorUntrusted(str(error)) from error
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        self._drop_heartbeat_stream()
        with self._lock:
            self._closed = True
            for channel in [*self._retired, *([self._channel] if self._channel else [])]:
                channel.close()

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        """The session token (the connection it is used on must be bound to it)."""
        return ((SESSION_METADATA_KEY, self._session),)

    def _rebind(self, stub: node_pb2_grpc.NodeServiceStub, error: grpc.RpcError) -> bool:
        """When error says the session is not bound to the stub's connection, bind it there;
        False when the error is another."""
        nonce = bind_nonce(error)
        if nonce is None or self._identity is None:
            return False
        try:
            bind_session(stub, self._identity, self._session, nonce)
        except grpc.RpcError as refused:
            raise _translate(refused) from refused
        log.info("session bound to a new connection to %s", self._address)
        return True

    def _unary(self, method: str, request, **options):  # type: ignore[no-untyped-def]
        """Call a unary method with the session; re-bind and retry once on a new connection."""
        stub = self._stub
        for attempt in range(2):
            try:
                return getattr(stub, method)(request, timeout=RPC_DEADLINE_S,
                                             metadata=self._metadata(), **options)
            except grpc.RpcError as error:
                if attempt == 1 or not self._rebind(stub, error):
                    raise _translate(error) from error
        raise AssertionError("unreachable: the second attempt returned or raised")  # pragma: no cover

    def register(self, identity: Identity, hardware: HardwareReport, models: tuple[ModelSpec, ...],
                 operator_id: str, display_name: str, max_concurrent_jobs: int,
                 status: NodeStatus | None = None, pod: PodDeclaration | None = None,
                 operator_key: str = "", region: str = "") -> int:
        """Register and keep the session; returns the heartbeat interval in ms."""
        try:
            challenge = self._stub.RegisterChallenge(
                node_pb2.RegisterChallengeRequest(public_key=identity.public_key_raw),
                timeout=RPC_DEADLINE_S)
            request = register_request(identity, challenge.nonce, hardware, models, operator_id,
                                       display_name, max_concurrent_jobs, status, pod, operator_key,
                                       region)
            response = self._stub.Register(request, timeout=RPC_DEADLINE_S)
        except grpc.RpcError as error:
            raise _translate(error) from error
        self._session = response.session_token
        self._models = {m.model_id: m for m in models}
        self._identity = identity
        self._signed_heartbeat_interval_ms = response.signed_heartbeat_interval_ms
        self._last_signed = (0, "")
        self._drop_heartbeat_stream()  # it carries the old session
        return response.heartbeat_interval_ms

    def bind_connection(self) -> None:
        """Bind the session to the current channel's connection now (calls do it when needed)."""
        assert self._identity is not None, "register first"
        try:
            bind_session(self._stub, self._identity, self._session)
        except grpc.RpcError as error:
            raise _translate(error) from error

    def _sign_due(self, sent_at_ms: int, status: NodeStatus) -> bool:
        """Signed heartbeats prove uptime (the Ultra-seat bonus): one every signed interval
        keeps the proof unbroken, and a change of lending mode or a benchmark is signed at once."""
        last_ms, last_mode = self._last_signed
        return (status.benchmark is not None or status.lending.mode.value != last_mode
                or sent_at_ms - last_ms >= self._signed_heartbeat_interval_ms)

    def heartbeat(self, running_jobs: int, status: NodeStatus | None = None) -> None:
        """With a status the heartbeat carries it, signed when due (_sign_due): a signed one is
        stored as proof the node was online."""
        request = node_pb2.HeartbeatRequest(running_jobs=running_jobs)
        if status is not None and self._identity is not None:
            request.lending.CopyFrom(_lending_pb(status.lending))
            request.warm_models.extend(status.warm_models)
            if status.benchmark is not None:
                request.benchmark.CopyFrom(_benchmark_pb(status.benchmark))
            # Strictly increasing, so two heartbeats in one millisecond never look like a replay.
            sent_at_ms = max(time.time_ns() // 1_000_000, self._last_sent_ms + 1)
            if self._sign_due(sent_at_ms, status):
                self._last_sent_ms = sent_at_ms
                claim = Heartbeat(self._identity.node_id, sent_at_ms, running_jobs, status.lending)
                request.sent_at_ms = sent_at_ms
                request.signature = self._identity.sign(heartbeat_message(claim))
                self._last_signed = (sent_at_ms, status.lending.mode.value)
        self._send_heartbeat(request)

    def _send_heartbeat(self, request: node_pb2.HeartbeatRequest) -> None:
        """On the open heartbeat stream (opened, or bound, as needed); unary where the
        coordinator has no stream (an older one)."""
        if not self._stream_heartbeats:
            self._unary("Heartbeat", request)
            return
        with self._heartbeat_lock:
            stub = self._stub
            for attempt in range(2):
                stream = self._heartbeat_stream
                if stream is None or stream.stub is not stub or stream.ended():  # or a failed-over channel
                    if stream is not None:
                        stream.close()
                    stream = self._heartbeat_stream = _HeartbeatStream(stub, self._metadata())
                try:
                    stream.beat(request, RPC_DEADLINE_S)
                    return
                except grpc.RpcError as error:
                    stream.close()
                    self._heartbeat_stream = None
                    if error.code() is grpc.StatusCode.UNIMPLEMENTED:
                        self._stream_heartbeats = False
                        break
                    if attempt == 0 and error.code() in _RETRYABLE:
                        continue  # the stream broke before this beat (a restart): a new one
                    if attempt == 1 or not self._rebind(stub, error):
                        raise _translate(error) from error
                except CoordinatorUnavailable:
                    stream.close()
                    self._heartbeat_stream = None
                    raise
        self._unary("Heartbeat", request)

    def _drop_heartbeat_stream(self) -> None:
        with self._heartbeat_lock:
            if self._heartbeat_stream is not None:
                self._heartbeat_stream.close()
                self._heartbeat_stream = None

    def assignments(self) -> Iterator[Assignment | CheckJob | Challenge]:
        """Blocks for assignments until the stream breaks (raised as a CoordinatorCallError).

        A CheckJob is a prefill-only replay of another node's job (node_agent/peer_checks.py);
        a Challenge, a challenge benchmark to run on the reference model at once."""
        stub = self._stub
        for attempt in range(2):
            stream = stub.ReceiveAssignments(node_pb2.ReceiveAssignmentsRequest(),
                                             metadata=self._metadata())
            try:
                yield from self._assignments_of(stream)
                return
            except grpc.RpcError as error:
                # A new connection refuses the stream before its first message: bind, open again.
                if attempt == 1 or not self._rebind(stub, error):
                    raise _translate(error) from error
            finally:
                stream.cancel()

    def _assignments_of(self, stream: Iterator[node_pb2.ReceiveAssignmentsResponse],
                        ) -> Iterator[Assignment | CheckJob | Challenge]:
        for message in stream:
            if message.HasField("challenge"):
                yield Challenge(message.challenge.challenge_id, message.challenge.prompt,
                                message.challenge.seed, message.challenge.decode_tokens)
                continue
            spec = self._models.get(message.model.model_id)
            if spec is None:
                raise CallRejected("FAILED_PRECONDITION",
                                   f"assigned model {message.model.model_id} is not served here")
            if message.HasField("check"):
                check = _check_job(message, spec)
                if check is not None:
                    yield check
                continue
            self._note_attempt(message.job_id, message.attempt)
            yield Assignment(job_id=message.job_id, model=spec, prompt=message.prompt,
                             max_tokens=message.sampling.max_tokens,
                             temperature=message.sampling.temperature,
                             top_p=message.sampling.top_p, seed=message.sampling.seed,
                             strategy=message.strategy or "single", pod_id=message.pod_id,
                             pod_leader_node_id=message.pod_leader_node_id,
                             pod_node_ids=tuple(message.pod_node_ids),
                             layer_split=tuple(message.layer_split),
                             top_logprobs=message.top_logprobs if message.logprobs else -1,
                             traceparent=message.traceparent)

    def _note_attempt(self, job_id: str, attempt: int) -> None:
        """Every report on the job names this attempt, its fencing token: the coordinator
        refuses one from an attempt that is over."""
        if len(self._attempts) >= ATTEMPTS_KEPT_MAX:
            self._attempts.pop(next(iter(self._attempts)))
        self._attempts[job_id] = attempt

    def token_chunk_pb(self, job_id: str, c: Chunk, cached_prompt_tokens: int = 0) -> node_pb2.StreamTokensRequest:
        """The chunk as sent, naming the job's attempt."""
        return node_pb2.StreamTokensRequest(
            job_id=job_id, first_index=c.first_index, token_ids=c.token_ids, text=c.text,
            logprobs=[_logprob_pb(entry) for entry in c.logprobs], prompt_tokens=c.prompt_tokens,
            attempt=self._attempts.get(job_id, 0), cached_prompt_tokens=cached_prompt_tokens,
            partial_receipt=None if c.partial_receipt is None else common_pb2.SignedReceipt(
                body=c.partial_receipt[0], signature=c.partial_receipt[1]))

    def stream_node_tokens(self, messages: Iterator[node_pb2.StreamNodeTokensRequest]
                           ) -> Iterator[node_pb2.StreamNodeTokensResponse]:
        """The node's one token stream: answers (one a message) as they come, until it ends."""
        stub = self._stub
        responses = stub.StreamNodeTokens(messages, metadata=self._metadata())
        try:
            yield from responses
        except grpc.RpcError as error:
            self._rebind(stub, error)  # a new connection: bound now, so the stream opened next is served
            raise _translate(error) from error
        finally:
            responses.cancel()

    def stream_tokens(self, job_id: str,
                      chunks: Iterator[Chunk | tuple[int, tuple[int, ...], str]]) -> int:
        """Send chunks (or (first_index, token_ids, text) tuples) in one call; returns tokens accepted."""
        requests = (self.token_chunk_pb(job_id, c)
                    for c in (chunk if isinstance(chunk, Chunk) else Chunk(*chunk) for chunk in chunks))
        stub = self._stub
        sent = _Recorded(requests)
        try:
            response = stub.StreamTokens(sent, metadata=self._metadata())
        except grpc.RpcError as error:
            if not self._rebind(stub, error):
                raise _translate(error) from error
            if sent.overflowed:  # what gRPC took from the iterator is no longer all here
                raise CoordinatorUnavailable("the session was bound to a new connection; send "
                                             "the tokens again") from error
            try:  # the refusal came before any chunk was read: send them all again, then the rest
                response = stub.StreamTokens(itertools.chain(sent.taken, requests),
                                             metadata=self._metadata())
            except grpc.RpcError as again:
                raise _translate(again) from again
        return response.tokens_accepted

    def report_receipt(self, job_id: str, body: bytes, signature: bytes) -> int:
        request = node_pb2.ReportResultRequest(
            job_id=job_id, receipt=common_pb2.SignedReceipt(body=body, signature=signature),
            attempt=self._attempts.get(job_id, 0))
        return self._unary("ReportResult", request).credited_base_units

    def report_prompt_cache(self, job_id: str, cached_prompt_tokens: int) -> None:
        """Of the running job's prompt, how many tokens came from the prompt cache (the consumer's usage)."""
        request = node_pb2.ReportPromptCacheRequest(job_id=job_id, cached_prompt_tokens=cached_prompt_tokens,
                                                    attempt=self._attempts.get(job_id, 0))
        self._unary("ReportPromptCache", request)

    def report_failure(self, job_id: str, reason: str, handed_back: bool = False,
                       prompt_too_long: bool = False) -> None:
        """The job failed here; with handed_back it is unfinished and goes to another Mac."""
        request = node_pb2.ReportResultRequest(
            job_id=job_id, failure_reason=reason, handed_back=handed_back,
            failure=(node_pb2.JOB_FAILURE_PROMPT_TOO_LONG if prompt_too_long
                     else node_pb2.JOB_FAILURE_UNSPECIFIED), attempt=self._attempts.get(job_id, 0))
        self._unary("ReportResult", request)

    def report_check(self, check_id: str, body: bytes = b"", signature: bytes = b"",
                     failure_reason: str = "") -> bool:
        """A check job's signed result, or why it could not run; False: it had lapsed."""
        request = node_pb2.ReportCheckRequest(check_id=check_id, failure_reason=failure_reason)
        if not failure_reason:
            request.result.CopyFrom(node_pb2.SignedCheckResult(body=body, signature=signature))
        return self._unary("ReportCheck", request).accepted

    def answer_challenge(self, challenge_id: str, token_ids: tuple[int, ...], decode_tokens_per_s: float,
                         receipt: tuple[bytes, bytes] | None = None) -> str | None:
        """Send a challenge benchmark's answer with its signed receipt (body, signature); None when
        it fit (its replay decides later), else the coordinator's reason."""
        signed = None if receipt is None else common_pb2.SignedReceipt(body=receipt[0], signature=receipt[1])
        response = self._unary("AnswerChallenge", node_pb2.AnswerChallengeRequest(
            challenge_id=challenge_id, token_ids=list(token_ids),
            decode_tokens_per_s=decode_tokens_per_s, receipt=signed))
        return None if response.passed else response.reason

    def leave(self, reason: str) -> int:
        """Deregister; returns how many jobs the coordinator handed back."""
        return self._unary("Leave", node_pb2.LeaveRequest(reason=reason)).jobs_handed_back
