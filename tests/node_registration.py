"""Register a node with a service in-process, as a node agent would over gRPC: a nonce from
RegisterChallenge, the whole request signed, and a named operator's key made first.

Shared by the service-level tests and bench/; it builds the very RegisterRequest the agent
sends (node_agent.coordinator_client.register_request) and converts it at the edge.
"""

from __future__ import annotations

import weakref

import grpc

from contracts.hardware import HardwareReport
from contracts.ids import NodeId
from contracts.models import ModelSpec
from contracts.signing import session_bind_message
from coordinator.nodes.registry import Registration
from coordinator.rpc.convert import registration_from_pb
from coordinator.service import CoordinatorService
from coordinator.world.operator_keys import create_operator_key
from coordinator.errors import SessionUnbound
from coordinator.service.node_sessions import IN_PROCESS
from node_agent.coordinator_client import NodeStatus, bind_session, register_request
from protos.mlxnet.v1 import node_pb2_grpc
from node_agent.identity import Identity

# service -> operator -> key, made once per service (weak: an id() could be reused by the next test's)
_KEYS: weakref.WeakKeyDictionary[CoordinatorService, dict[str, str]] = weakref.WeakKeyDictionary()


def operator_key_for(service: CoordinatorService, operator: str) -> str:
    """A live key for the operator in the service's database (as `mlxnet keys create --operator`)."""
    keys = _KEYS.setdefault(service, {})
    if operator not in keys:
        with service.db.transaction() as session:
            _, keys[operator] = create_operator_key(session, operator, "test", service.clock.now_ms())
    return keys[operator]


def signed_registration(service: CoordinatorService, identity: Identity, hardware: HardwareReport,
                        models: tuple[ModelSpec, ...], operator: str, *, display_name: str = "n",
                        max_concurrent_jobs: int = 1, status: NodeStatus | None = None,
                        operator_key: str | None = None) -> Registration:
    nonce, _ = service.nodes.challenge(identity.public_key_raw)
    key = operator_key if operator_key is not None else operator_key_for(service, operator)
    request = register_request(identity, nonce, hardware, models, operator, display_name,
                               max_concurrent_jobs, status, operator_key=key)
    return registration_from_pb(request)


def register_node(service: CoordinatorService, identity: Identity, hardware: HardwareReport,
                  models: tuple[ModelSpec, ...], operator: str, **options: object) -> tuple[NodeId, str]:
    """Register the node; its id and session token."""
    return service.nodes.register(signed_registration(service, identity, hardware, models, operator,
                                                      **options))  # type: ignore[arg-type]


def bind_connection(service: CoordinatorService, identity: Identity, token: str,
                    connection: str = IN_PROCESS) -> None:
    """Bind the session to another connection in-process, as the agent does over gRPC: the
    refused call's nonce, signed by the node's key, in bind. (A restarted service, or calls
    named by another connection, need this; register binds its own.)"""
    try:
        service.nodes.authenticate(token, connection)
        return  # bound already
    except SessionUnbound as refused:
        nonce = refused.bind_nonce
    service.nodes.bind(token, connection, nonce, identity.sign(session_bind_message(nonce, token)))


def bind_channel(channel: grpc.Channel, identity: Identity, token: str) -> None:
    """Bind the session to a gRPC channel's connection (tests that call on a channel other
    than the one the node registered on)."""
    bind_session(node_pb2_grpc.NodeServiceStub(channel), identity, token)
