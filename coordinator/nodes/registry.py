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
from contracts.signing import PUBLIC_KEY_BYTES, session_bind_message, signature_is_valid
from coordinator.errors import InvalidRequest, PermissionDenied, RateLimited, Unauthenticated
from coordinator.jobs.handback import hand_back_jobs
from coordinator.verification.outcomes import CheckContext
from coordinator.model import NodeRecord
from coordinator.nodes import catalog, reports
from coordinator.nodes.admission import TokenBuckets
from coordinator.nodes.challenges import ChallengeBook
from coordinator.nodes.operators import proven_operator
from coordinator.storage import node_rows

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
    # What the signature covers: the whole request, canonically encoded (protos/wire/registration.py).
    signed_message: bytes = b""
    nonce: bytes = b""  # from RegisterChallenge, redeemed once
    operator_key: str = ""  # proves operator_id (coordinator/nodes/operators.py)
    region: str = ""  # where the operator publishes the Mac on MLX World's map (world.places)


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def admit(registration: Registration, now_ms: int, challenges: ChallengeBook) -> NodeId:
    """The node whose key signed the whole request over a nonce issued for it, which this
    uses up (in a transaction of its own: call it before register's)."""
    if len(registration.public_key) != PUBLIC_KEY_BYTES:
        raise InvalidRequest("public_key must be a raw 32-byte Ed25519 key")
    node_id = node_id_from_public_key(registration.public_key)
    if not registration.nonce:
        raise InvalidRequest("registration needs a nonce: call RegisterChallenge first and sign "
                             "the whole request (update the node agent)")
    if not signature_is_valid(registration.public_key, registration.signed_message,
                              registration.signature):
        raise PermissionDenied("registration signature does not verify over the request with the "
                               "given public key (it must cover every field and the nonce)")
    _check_sizes(registration)
    refused = challenges.redeem(registration.public_key, registration.nonce, now_ms)
    if refused is not None:
        raise PermissionDenied(refused)
    return node_id


def _check_sizes(registration: Registration) -> None:
    if not 1 <= registration.max_concurrent_jobs <= 64:
        raise InvalidRequest("max_concurrent_jobs must be between 1 and 64")
    if len(registration.models) > MODELS_PER_NODE_MAX:
        raise InvalidRequest(f"a node may serve at most {MODELS_PER_NODE_MAX} models")
    if len(registration.operator_id) > NAME_CHARS_MAX:
        raise InvalidRequest(f"operator_id must be at most {NAME_CHARS_MAX} characters")


def register(session: Session, registration: Registration, node_id: NodeId, now_ms: int,
             context: CheckContext, operator_buckets: TokenBuckets | None = None) -> tuple[NodeId, str]:
    """Record the node admit() let in and open a new session; jobs of the node's previous run
    are handed back."""
    operator_id = proven_operator(session, node_id, registration.operator_id, registration.operator_key)
    if operator_buckets is not None and not operator_buckets.take(operator_id, now_ms):
        wait_s = operator_buckets.seconds_until_next(operator_id, now_ms)
        raise RateLimited(f"operator {operator_id[:64]!r} is registering nodes faster than the "
                          f"coordinator allows; try again in {wait_s} s", retry_after_s=wait_s)
    catalog.check_and_bind(session, registration.models, node_id, now_ms)
    token = secrets.token_urlsafe(32)
    node = NodeRecord(
        node_id=node_id, public_key=registration.public_key,
        operator_id=OperatorId(operator_id),
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
    """The node whose session this is (whether this connection may use it is the caller's to check)."""
    if not token:
        raise Unauthenticated("missing x-mlxnet-session metadata; call Register first")
    node = node_rows.node_by_session(session, token_sha256(token))
    if node is None:
        raise Unauthenticated("unknown or replaced node session; register again")
    return node


def check_bind(node: NodeRecord, token: str, nonce: bytes, signature: bytes) -> None:
    """Raise PermissionDenied unless the node's key signed the bind nonce with this token: a
    session token copied without the key binds to no connection."""
    if not signature_is_valid(node.public_key, session_bind_message(nonce, token), signature):
        raise PermissionDenied("the bind signature is not the session's node's signature over the "
                               "nonce and token: a session is bound to its node's key")
