"""A small gRPC client for API consumers, used by `mlxnet submit` and the demo.

It speaks TLS and checks the coordinator's certificate against the system's CAs or a pinned
fingerprint (`--coordinator-fingerprint`, or $MLXNET_COORDINATOR_FINGERPRINT); plaintext only
to loopback with `--insecure`. A refused certificate raises contracts.tls.TransportRefused.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import grpc

from contracts.failover import Rotation, after_failure, parse_addresses, parse_fingerprints
from contracts.tls import CoordinatorTrust, TransportRefused
from protos.mlxnet.v1 import common_pb2, job_pb2, job_pb2_grpc
from protos.wire.channel import open_channel

RPC_DEADLINE_S = 30.0
STREAM_DEADLINE_S = 600.0
CONSUMER_METADATA_KEY = "x-mlxnet-consumer"
API_KEY_ENV = "MLXNET_API_KEY"  # the key JobClient sends when none is passed
FINGERPRINT_ENV = "MLXNET_COORDINATOR_FINGERPRINT"
TLS_REFUSED = "TLS"  # JobRequestError's code when the coordinator's certificate is refused
FAILOVER_ROUNDS_MAX = 3  # a call tries every coordinator this many times before it gives up


def add_trust_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator-fingerprint", metavar="SHA256",
                        default=os.environ.get(FINGERPRINT_ENV, ""),
                        help="pin the coordinator's certificate (it prints its fingerprint); "
                        "several coordinators: one they share, or one per --coordinator address, "
                        f"comma-separated; default ${FINGERPRINT_ENV}, else the system's CAs must "
                        "vouch for it")
    parser.add_argument("--insecure", action="store_true",
                        help="plaintext, to a coordinator on loopback only")


def trust_from_args(args: argparse.Namespace) -> dict[str, CoordinatorTrust]:
    """Each --coordinator address's trust; raises ValueError for a fingerprint that is not one."""
    addresses = parse_addresses(args.coordinator)
    if args.insecure:
        return {address: CoordinatorTrust(insecure=True) for address in addresses}
    pins = parse_fingerprints(args.coordinator_fingerprint or "", addresses)
    return {address: CoordinatorTrust(fingerprint=pins.get(address, "")) for address in addresses}


def client_from_args(args: argparse.Namespace, consumer: str = "") -> JobClient:
    """A client for --coordinator with add_trust_arguments' flags; a refusal is a JobRequestError."""
    try:
        return JobClient(args.coordinator, consumer, trust_by_address=trust_from_args(args))
    except (TransportRefused, ValueError) as error:
        raise JobRequestError(TLS_REFUSED, str(error)) from error


class JobRequestError(Exception):
    """The coordinator refused a request; `code` is the gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class StreamedTokens:
    first_index: int
    token_ids: tuple[int, ...]
    text: str


class JobClient:
    def __init__(self, address: str, consumer: str = "", api_key: str | None = None,
                 trust: CoordinatorTrust = CoordinatorTrust(),
                 trust_by_address: Mapping[str, CoordinatorTrust] | None = None) -> None:
        """address: HOST:PORT, or several coordinators of one network separated by commas:
        a call the current one cannot answer (UNAVAILABLE) goes to the next, and a stream
        that breaks resumes there where it stopped. api_key defaults to $MLXNET_API_KEY;
        without one the call is anonymous. trust is for every address not in trust_by_address.

        Raises TransportRefused for a coordinator not trusted, JobRequestError when none is reachable.
        """
        self._rotation = Rotation(parse_addresses(address))
        self._trusts = {a: (trust_by_address or {}).get(a, trust) for a in self._rotation.addresses}
        self._draws = random.Random()
        self._lock = threading.Lock()  # held while moving to another coordinator
        self._retired: list[grpc.Channel] = []  # channels of coordinators failed over from
        self._channel, self._stub = self._connect()
        key = os.environ.get(API_KEY_ENV, "") if api_key is None else api_key
        metadata = [(CONSUMER_METADATA_KEY, consumer)] if consumer else []
        if key:
            metadata.append(("authorization", f"Bearer {key}"))
        self._metadata = tuple(metadata)

    @property
    def address(self) -> str:
        """The coordinator the client talks to now."""
        return self._rotation.address

    def _connect(self) -> tuple[grpc.Channel, job_pb2_grpc.JobServiceStub]:
        """A channel to the current address, else the next that answers; TransportRefused is
        raised at once (a certificate not trusted is no outage to route around)."""
        problems = []
        for _ in self._rotation.addresses:
            address = self._rotation.address
            try:
                channel, _decision = open_channel(address, self._trusts[address])
                return channel, job_pb2_grpc.JobServiceStub(channel)
            except OSError as error:
                problems.append(f"cannot reach {address}: {error}")
                self._rotation, _wait_s = after_failure(self._rotation, 0.0)
        raise JobRequestError("UNAVAILABLE", "; ".join(problems))

    def _fail_over(self, error: grpc.RpcError, failures: int,
                   failed: job_pb2_grpc.JobServiceStub) -> bool:
        """After UNAVAILABLE from the coordinator behind `failed`: move to the next one (after
        its jitter or backoff) and return True, or False when there is none to try.

        Threads may share the client: the first to see a coordinator fail moves everyone on,
        and the old channel stays open until close() (another thread may be starting a call
        on it, and a closed channel raises ValueError, not a gRPC error).
        """
        if (error.code() is not grpc.StatusCode.UNAVAILABLE or len(self._rotation.addresses) < 2
                or failures >= FAILOVER_ROUNDS_MAX * len(self._rotation.addresses)):
            return False
        with self._lock:
            if self._stub is not failed:
                return True  # another thread has moved on already
            self._rotation, wait_s = after_failure(self._rotation, self._draws.random())
            time.sleep(wait_s)
            self._retired.append(self._channel)
            try:
                self._channel, self._stub = self._connect()
            except JobRequestError:
                return failures + 1 < FAILOVER_ROUNDS_MAX * len(self._rotation.addresses)
        return True

    def close(self) -> None:
        for channel in [*self._retired, self._channel]:
            channel.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _call(self, method_name: str, request):  # type: ignore[no-untyped-def]
        """One unary call; every one here is safe to repeat at another coordinator (a submit
        carries its request id, which finds the job a first try made)."""
        failures = 0
        while True:
            stub = self._stub
            try:
                return getattr(stub, method_name)(request, timeout=RPC_DEADLINE_S,
                                                  metadata=self._metadata)
            except grpc.RpcError as error:
                if not self._fail_over(error, failures, stub):
                    raise JobRequestError(error.code().name, error.details() or "") from error
                failures += 1

    def submit(self, model: str, prompt: str, *, max_tokens: int = 0, temperature: float = 0.0,
               top_p: float = 0.0, seed: int = 0, request_id: str = "") -> job_pb2.Job:
        """request_id: the client's idempotency id; without one a fresh id is chosen, so a
        retry at another coordinator finds the same job instead of making a second."""
        request_id = request_id or uuid.uuid4().hex
        request = job_pb2.SubmitJobRequest(
            model=model, prompt=prompt, request_id=request_id,
            sampling=common_pb2.SamplingParams(max_tokens=max_tokens, temperature=temperature,
                                               top_p=top_p, seed=seed))
        return self._call("SubmitJob", request).job

    def get(self, job_id: str) -> job_pb2.Job:
        return self._call("GetJob", job_pb2.GetJobRequest(job_id=job_id)).job

    def cancel(self, job_id: str) -> job_pb2.Job:
        return self._call("CancelJob", job_pb2.CancelJobRequest(job_id=job_id)).job

    def explain_placement(self, model: str, context_tokens: int,
                          min_decode_tokens_per_s: float = 0.0) -> job_pb2.ExplainPlacementResponse:
        request = job_pb2.ExplainPlacementRequest(
            model=model, context_tokens=context_tokens,
            min_decode_tokens_per_s=min_decode_tokens_per_s)
        return self._call("ExplainPlacement", request)

    def stream(self, job_id: str) -> Iterator[StreamedTokens | job_pb2.Job]:
        """Tokens as they are made, then the final job. Should the coordinator go away mid-stream,
        the stream resumes at another one, without repeating what was already yielded."""
        resume = Resume()
        failures = 0
        while True:
            resume.restart()
            stub = self._stub
            try:
                for message in stub.StreamJob(job_pb2.StreamJobRequest(job_id=job_id),
                                              timeout=STREAM_DEADLINE_S, metadata=self._metadata):
                    if message.HasField("final_job"):
                        yield message.final_job
                        return
                    tokens = resume.fresh(message.first_index, tuple(message.token_ids),
                                          message.text)
                    if tokens is not None:
                        yield tokens
            except grpc.RpcError as error:
                if not self._fail_over(error, failures, stub):
                    raise JobRequestError(error.code().name, error.details() or "") from error
                failures += 1
                continue
            raise JobRequestError("UNAVAILABLE", f"the stream of {job_id} ended before the job did")


class Resume:
    """What a restarted stream repeats, cut off: a stream starts again from the job's first
    token, and its tokens and text come again as before (the same chunks, the same stop cut)."""

    def __init__(self) -> None:
        self.tokens_delivered = 0  # the next token index the caller has not seen
        self.chars_delivered = 0  # of text, which a stop sequence may hold back apart from tokens
        self._chars_replayed = 0  # of text on the current stream

    def restart(self) -> None:
        self._chars_replayed = 0

    def fresh(self, first_index: int, token_ids: tuple[int, ...], text: str) -> StreamedTokens | None:
        """The part of this message the caller has not seen, or None when it has seen it all."""
        skip_tokens = max(0, self.tokens_delivered - first_index)
        skip_chars = max(0, self.chars_delivered - self._chars_replayed)
        self._chars_replayed += len(text)
        token_ids, text = token_ids[skip_tokens:], text[skip_chars:]
        if not token_ids and not text:
            return None
        first_index += skip_tokens
        self.tokens_delivered = max(self.tokens_delivered, first_index + len(token_ids))
        self.chars_delivered += len(text)
        return StreamedTokens(first_index, token_ids, text)
