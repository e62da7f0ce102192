"""Node registration, sessions and heartbeats."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, replace

from sqlalchemy.orm import Session

from contracts.benchmarks import BenchmarkResult
from contracts.hardware import HardwareReport
from contracts.ids import NodeId, OperatorId, node_id_from_public_key
from contracts.lending import LendingState
from contracts.models import ModelSpec
from contracts.pods import PodDeclaration, pod_problems
from contracts.signing import PUBLIC_KEY_BYTES, register_challenge, signature_is_valid
from coordinator.errors import InvalidRequest, PermissionDenied, Unauthenticated
from coordinator.jobs.handback import hand_back_jobs
from coordinator.verification.outcomes import CheckContext
from coordinator.model import NodeRecord
from coordinator.nodes import reports
from coordinator.storage import node_rows

REGISTER_CLOCK_SKEW_MS_MAX = 5 * 60 * 1000  # a signed registration is only good this long
MODELS_PER_NODE_MAX = 64
NAME_CHARS_MAX = 128


@dataclass(frozen=True)
class Registration:
    public_key: bytes
    signature: bytes
    timestamp_ms: int
    hardware: HardwareReport
    models: tuple[ModelSpec, ...]
    operator_id: str
    display_name: str
    max_concurrent_jobs: int
    lending: LendingState = LendingState()
    benchmark: BenchmarkResult | None = None
    warm_models: tuple[str, ...] = ()
    pod: PodDeclaration | None = None  # declared by the pod's leader; its leader field is ignored
    region: str = ""  # where the operator publishes the Mac on MLX World's map (world.places)


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _validate(registration: Registration, now_ms: int) -> NodeId:
    if len(registration.public_key) != PUBLIC_KEY_BYTES:
        raise InvalidRequest("public_key must be a raw 32-byte Ed25519 key")
    node_id = node_id_from_public_key(registration.public_key)
    if abs(now_ms - registration.timestamp_ms) > REGISTER_CLOCK_SKEW_MS_MAX:
        raise InvalidRequest("timestamp_ms is more than 5 minutes from the coordinator's clock; "
                             "check the node's clock")
    challenge = register_challenge(node_id, registration.timestamp_ms)
    if not signature_is_valid(registration.public_key, challenge, registration.signature):
        raise PermissionDenied("registration signature does not verify with the given public key")
    if not 1 <= registration.max_concurrent_jobs <= 64:
        raise InvalidRequest("max_concurrent_jobs must be between 1 and 64")
    if len(registration.models) > MODELS_PER_NODE_MAX:
        raise InvalidRequest(f"a node may serve at most {MODELS_PER_NODE_MAX} models")
    if not registration.operator_id or len(registration.operator_id) > NAME_CHARS_MAX:
        raise InvalidRequest(f"operator_id must be 1 to {NAME_CHARS_MAX} characters")
    return node_id


def register(session: Session, registration: Registration, now_ms: int,
             context: CheckContext) -> tuple[NodeId, str]:
    """Record the node and open a new session; jobs of the node's previous run are handed back."""
    node_id = _validate(registration, now_ms)
    token = secrets.token_urlsafe(32)
    node = NodeRecord(
        node_id=node_id, public_key=registration.public_key,
        operator_id=OperatorId(registration.operator_id),
        display_name=(registration.display_name or node_id)[:NAME_CHARS_MAX],
        hardware=registration.hardware, models=registration.models,
        max_concurrent_jobs=registration.max_concurrent_jobs,
        registered_at_ms=now_ms, last_heartbeat_ms=now_ms, lending=registration.lending,
        warm_models=registration.warm_models[:reports.WARM_MODELS_MAX])
    reports.check_lending(node, registration.lending)
    node_rows.save_node(session, node, token_sha256(token))
    if registration.benchmark is not None:
        reports.accept_benchmark(session, node, registration.benchmark, now_ms)
    if registration.pod is not None:
        pod = replace(registration.pod, leader=node_id)
        problems = pod_problems(pod)
        if problems:
            raise InvalidRequest("pod declaration refused: " + "; ".join(problems))
        node_rows.save_pod(session, pod, now_ms)
    # A registering agent has just started, so it holds none of its earlier jobs.
    hand_back_jobs(session, node_id, "node agent restarted", now_ms, context)
    return node_id, token


def authenticate(session: Session, token: str | None) -> NodeRecord:
    if not token:
        raise Unauthenticated("missing x-mlxnet-session metadata; call Register first")
    node = node_rows.node_by_session(session, token_sha256(token))
    if node is None:
        raise Unauthenticated("unknown or replaced node session; register again")
    return node
