"""A small gRPC client for API consumers, used by `mlxnet submit` and the demo.

It speaks TLS and checks the coordinator's certificate against the system's CAs or a pinned
fingerprint (`--coordinator-fingerprint`, or $MLXNET_COORDINATOR_FINGERPRINT); plaintext only
to loopback with `--insecure`. A refused certificate raises contracts.tls.TransportRefused.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from dataclasses import dataclass

import grpc

from contracts.tls import CoordinatorTrust, TransportRefused, normalize_fingerprint
from protos.mlxnet.v1 import common_pb2, job_pb2, job_pb2_grpc
from protos.wire.channel import open_channel

RPC_DEADLINE_S = 30.0
STREAM_DEADLINE_S = 600.0
CONSUMER_METADATA_KEY = "x-mlxnet-consumer"
API_KEY_ENV = "MLXNET_API_KEY"  # the key JobClient sends when none is passed
FINGERPRINT_ENV = "MLXNET_COORDINATOR_FINGERPRINT"
TLS_REFUSED = "TLS"  # JobRequestError's code when the coordinator's certificate is refused


def add_trust_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator-fingerprint", metavar="SHA256",
                        default=os.environ.get(FINGERPRINT_ENV, ""),
                        help="pin the coordinator's certificate (it prints its fingerprint); "
                        f"default ${FINGERPRINT_ENV}, else the system's CAs must vouch for it")
    parser.add_argument("--insecure", action="store_true",
                        help="plaintext, to a coordinator on loopback only")


def trust_from_args(args: argparse.Namespace) -> CoordinatorTrust:
    """Raises ValueError for a fingerprint that is not one."""
    if args.insecure:
        return CoordinatorTrust(insecure=True)
    pinned = args.coordinator_fingerprint
    return CoordinatorTrust(fingerprint=normalize_fingerprint(pinned) if pinned else "")


def client_from_args(args: argparse.Namespace, consumer: str = "") -> JobClient:
    """A client for --coordinator with add_trust_arguments' flags; a refusal is a JobRequestError."""
    try:
        return JobClient(args.coordinator, consumer, trust=trust_from_args(args))
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
                 trust: CoordinatorTrust = CoordinatorTrust()) -> None:
        """api_key defaults to $MLXNET_API_KEY; without one the call is anonymous.

        Raises TransportRefused for a coordinator not trusted, JobRequestError when unreachable.
        """
        try:
            self._channel, _ = open_channel(address, trust)
        except OSError as error:
            raise JobRequestError("UNAVAILABLE", f"cannot reach {address}: {error}") from error
        self._stub = job_pb2_grpc.JobServiceStub(self._channel)
        key = os.environ.get(API_KEY_ENV, "") if api_key is None else api_key
        metadata = [(CONSUMER_METADATA_KEY, consumer)] if consumer else []
        if key:
            metadata.append(("authorization", f"Bearer {key}"))
        self._metadata = tuple(metadata)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _call(self, method, request):  # type: ignore[no-untyped-def]
        try:
            return method(request, timeout=RPC_DEADLINE_S, metadata=self._metadata)
        except grpc.RpcError as error:
            raise JobRequestError(error.code().name, error.details() or "") from error

    def submit(self, model: str, prompt: str, *, max_tokens: int = 0, temperature: float = 0.0,
               top_p: float = 0.0, seed: int = 0, request_id: str = "") -> job_pb2.Job:
        request = job_pb2.SubmitJobRequest(
            model=model, prompt=prompt, request_id=request_id,
            sampling=common_pb2.SamplingParams(max_tokens=max_tokens, temperature=temperature,
                                               top_p=top_p, seed=seed))
        return self._call(self._stub.SubmitJob, request).job

    def get(self, job_id: str) -> job_pb2.Job:
        return self._call(self._stub.GetJob, job_pb2.GetJobRequest(job_id=job_id)).job

    def cancel(self, job_id: str) -> job_pb2.Job:
        return self._call(self._stub.CancelJob, job_pb2.CancelJobRequest(job_id=job_id)).job

    def explain_placement(self, model: str, context_tokens: int,
                          min_decode_tokens_per_s: float = 0.0) -> job_pb2.ExplainPlacementResponse:
        request = job_pb2.ExplainPlacementRequest(
            model=model, context_tokens=context_tokens,
            min_decode_tokens_per_s=min_decode_tokens_per_s)
        return self._call(self._stub.ExplainPlacement, request)

    def stream(self, job_id: str) -> Iterator[StreamedTokens | job_pb2.Job]:
        """Tokens as they are made, then the final job."""
        try:
            for message in self._stub.StreamJob(job_pb2.StreamJobRequest(job_id=job_id),
                                                timeout=STREAM_DEADLINE_S, metadata=self._metadata):
                if message.HasField("final_job"):
                    yield message.final_job
                    return
                yield StreamedTokens(message.first_index, tuple(message.token_ids), message.text)
        except grpc.RpcError as error:
            raise JobRequestError(error.code().name, error.details() or "") from error
