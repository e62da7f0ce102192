"""A coordinator as a child process for the fuzzers, a node of the fuzzers' own, and a real node.

Nothing here loads MLX into the pytest process: the coordinator, the tiny model's build and
the node that runs the closing job are all child processes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from contracts.hardware import ChipTier, HardwareReport
from contracts.tls import CoordinatorTrust
from contracts.models import ModelSpec
from mlxnet.consumer import JobClient
from mlxnet.processes import Child, start_coordinator, start_nodes
from node_agent.coordinator_client import (
    CallRejected,
    CoordinatorClient,
    CoordinatorUnavailable,
    SessionExpired,
)
from node_agent.identity import Identity, load_or_create_identity
from protos.mlxnet.v1 import job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc
from tests.fuzz.hostile import FUZZ_MODEL_ID, SERVER_FAILURES, apply_mutations
from tests.fuzz.hostile import Path as Path_
from tests.node_registration import bind_channel

TINY_MODEL_ID = "test/tiny-llama"
PLAINTEXT = CoordinatorTrust(insecure=True)  # the fuzzed coordinator serves plaintext on loopback
BUILD_TIMEOUT_S = 300
# The fuzzers register hundreds of times from one address; the Sybil limits have their own tests.
UNLIMITED_REGISTRATIONS = ("--registrations-per-address-burst", "1000000",
                           "--registrations-per-address-per-minute", "1000000")
FUZZ_MODEL = ModelSpec(model_id=FUZZ_MODEL_ID, weights_bytes=10_000_000, parameter_count=2_500_000,
                       num_layers=4, num_attention_heads=4, num_kv_heads=4, head_dim=64,
                       max_context_tokens=2048, weights_digest="ab" * 32, vocab_size=256)
FUZZ_HARDWARE = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO,
                               memory_bytes=64 << 30, gpu_working_set_bytes=48 << 30, gpu_cores=20,
                               memory_bandwidth_gb_s=273.0, os_name="macOS (simulated)", simulated=True)


@dataclass
class Target:
    """The coordinator under fuzz, and the session of a node registered on it."""

    work_dir: Path
    coordinator: Child
    node: CoordinatorClient
    identity: Identity

    @property
    def address(self) -> str:
        return self.coordinator.extra["address"]

    @property
    def http_base_url(self) -> str:
        return f"http://{self.coordinator.extra['http_address']}"

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.work_dir / 'coordinator' / 'coordinator.db'}"

    def session(self) -> tuple[tuple[str, str], ...]:
        return self.node._metadata()

    def channel(self) -> grpc.Channel:
        """A connection of the fuzzers' own, bound to the node's session by its key (as the
        agent binds each new connection), so node calls with session() reach their logic."""
        channel = grpc.insecure_channel(self.address)
        try:
            bind_channel(channel, self.identity, self.node.session_token)
        except grpc.RpcError as error:
            if error.code() in SERVER_FAILURES:  # type: ignore[attr-defined]
                raise
            # Otherwise a fuzzed Register or Leave replaced the session: calls are a stranger's.
        return channel

    def alive(self) -> bool:
        return self.coordinator.process.poll() is None

    def probe(self) -> list[str]:
        """What an honest node, consumer and visitor find broken now (empty when nothing is)."""
        problems = []
        if not self.alive():
            return ["the coordinator process exited"]
        try:
            self.node.heartbeat(0)
        except (CallRejected, CoordinatorUnavailable) as error:
            if any(code in str(error) for code in ("UNKNOWN", "INTERNAL")):
                problems.append(f"an honest heartbeat failed: {error}")
        except SessionExpired:
            pass  # a fuzzed Leave or Register replaced the session: not a failure
        with self.channel() as channel:
            try:
                job_pb2_grpc.JobServiceStub(channel).ExplainPlacement(
                    job_pb2.ExplainPlacementRequest(model=FUZZ_MODEL_ID, context_tokens=64), timeout=30)
            except grpc.RpcError as error:
                if error.code() in SERVER_FAILURES:  # type: ignore[attr-defined]
                    problems.append(f"ExplainPlacement failed: {error.details()}")  # type: ignore[attr-defined]
        for path in ("/world/api/fleet", "/world/api/totals", "/v1/models?all=true"):
            response = httpx.get(self.http_base_url + path, timeout=30)
            if response.status_code >= 500:
                problems.append(f"GET {path} answered {response.status_code}")
        return problems

    def register_mutated(self, changes: list[tuple[Path_, object]]) -> grpc.StatusCode:
        """Register the fuzzers' node through the agent's own code (its key, its signature) with
        hostile changes made to the request in flight: what a client holding a key can make the
        coordinator store. Fields from 20 up (registration proofs) are kept as signed."""
        kept = [(path, value) for path, value in changes
                if path[0] not in SIGNED_ENVELOPE
                and node_pb2.RegisterRequest.DESCRIPTOR.fields_by_name[path[0]].number < 20]

        def mutate(request: node_pb2.RegisterRequest) -> node_pb2.RegisterRequest:
            if not isinstance(request, node_pb2.RegisterRequest):  # the nonce's RegisterChallenge
                return request
            return apply_mutations(request, kept)  # type: ignore[return-value]

        channel = grpc.intercept_channel(grpc.insecure_channel(self.address), _Mutating(mutate))
        honest_stub = self.node._stub
        self.node._stub_value = node_pb2_grpc.NodeServiceStub(channel)  # the agent's own signing code
        try:
            self.node.register(self.identity, FUZZ_HARDWARE, (FUZZ_MODEL,), self.identity.node_id, "fuzz node", 1)
        except SessionExpired:
            return grpc.StatusCode.UNAUTHENTICATED
        except (CallRejected, CoordinatorUnavailable) as error:  # "CODE: details"
            return grpc.StatusCode[str(error).split(":", 1)[0]]
        finally:
            self.node._stub_value = honest_stub
        return grpc.StatusCode.OK

    def register_honestly(self) -> None:
        self.node.register(self.identity, FUZZ_HARDWARE, (FUZZ_MODEL,), self.identity.node_id, "fuzz node", 1)


SIGNED_ENVELOPE = frozenset({"public_key", "signature", "timestamp_ms"})


class _Mutating(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, mutate: Callable[[node_pb2.RegisterRequest], node_pb2.RegisterRequest]) -> None:
        self._mutate = mutate

    def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return continuation(client_call_details, self._mutate(request))


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    work_dir = tmp_path_factory.mktemp("fuzz")
    coordinator = start_coordinator(work_dir, allow_anonymous=True, tls=False,
                                    extra_args=UNLIMITED_REGISTRATIONS)  # plaintext, loopback
    node = CoordinatorClient(coordinator.extra["address"], PLAINTEXT)
    try:
        target = Target(work_dir, coordinator, node, load_or_create_identity(work_dir / "fuzz-node.pem"))
        target.register_honestly()
        yield target
    finally:
        node.close()
        coordinator.stop()


def build_tiny_model(directory: Path) -> Path:
    """The project's tiny model, built by a child process (MLX stays out of this one)."""
    subprocess.run([sys.executable, "-m", "mlxnet.cli", "model", "build-tiny", str(directory)],
                   check=True, timeout=BUILD_TIMEOUT_S, capture_output=True)
    return directory


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("fuzz-models") / "tiny-llama")


def serves_a_normal_job(target: Target, model_dir: Path) -> job_pb2.Job:
    """Start a real node (a child process running MLX) and run one ordinary job to the end."""
    nodes = start_nodes(target.work_dir, target.address,
                        [("honest", [f"{TINY_MODEL_ID}={model_dir}"], "m4-pro-64", "honest")],
                        trust=PLAINTEXT)
    try:
        with JobClient(target.address, trust=PLAINTEXT) as consumer:
            job = consumer.submit(TINY_MODEL_ID, "In the beginning", max_tokens=8)
            final = [item for item in consumer.stream(job.job_id) if isinstance(item, job_pb2.Job)]
        return final[-1]
    finally:
        for child in nodes:
            child.stop()
