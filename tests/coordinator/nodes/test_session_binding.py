"""The session token is bound to the connection and to the node's key (issue 25): it works only
on the connection its node registered on, or one where the node signed a bind nonce issued
there. A token replayed on any other connection is refused with UNAUTHENTICATED, and only the
node's key can bind it; the honest agent binds new connections by itself."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pytest

from contracts.signing import BIND_NONCE_METADATA_KEY, session_bind_message
from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from coordinator.errors import PermissionDenied, SessionUnbound, Unauthenticated
from coordinator.live.notifier import fleet_topic
from coordinator.nodes.reports import HeartbeatReport
from coordinator.server import RunningCoordinator, start
from coordinator.nodes.registry import token_sha256
from node_agent.coordinator_client import CallRejected, CoordinatorClient, CoordinatorUnavailable, bind_session
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import node_pb2, node_pb2_grpc
from tests.coordinator.nodes.test_admission import coordinator, service  # noqa: F401 (the fixtures)
from tests.coordinator.verification.test_outcomes import MODEL
from tests.node_registration import bind_connection, register_node

MINI = simulated_profile("m4-pro-64")
OWN_CONNECTION = ("grpc.use_local_subchannel_pool", 1)  # never share a TCP connection with another channel


def _refusal(call) -> SessionUnbound:  # type: ignore[no-untyped-def]
    with pytest.raises(SessionUnbound) as refused:
        call()
    assert len(refused.value.bind_nonce) == 32
    return refused.value


def test_a_token_works_only_on_connections_its_key_bound(service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    alice = load_or_create_identity(tmp_path / "alice.pem")
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _, token = register_node(service, alice, MINI, (MODEL,), "alice", )
    assert service.nodes.authenticate(token).node_id == alice.node_id  # where it registered
    nonce = _refusal(lambda: service.nodes.authenticate(token, "ipv4:10.0.0.9:4000")).bind_nonce
    refusals = {
        "another key's signature": mallory.sign(session_bind_message(nonce, token)),
        "a signature over another token": alice.sign(session_bind_message(nonce, token + "x")),
        "no signature": b"",
    }
    for name, signature in refusals.items():
        nonce = _refusal(lambda: service.nodes.authenticate(token, "ipv4:10.0.0.9:4000")).bind_nonce
        with pytest.raises(PermissionDenied):
            service.nodes.bind(token, "ipv4:10.0.0.9:4000", nonce, signature)
            pytest.fail(f"{name} bound the session")
    _refusal(lambda: service.nodes.authenticate(token, "ipv4:10.0.0.9:4000"))  # still not bound

    # A nonce binds only the connection it was issued on, and only once.
    nonce = _refusal(lambda: service.nodes.authenticate(token, "ipv4:10.0.0.9:4000")).bind_nonce
    signature = alice.sign(session_bind_message(nonce, token))
    _refusal(lambda: service.nodes.bind(token, "ipv4:10.0.0.7:5000", nonce, signature))
    nonce = _refusal(lambda: service.nodes.authenticate(token, "ipv4:10.0.0.9:4000")).bind_nonce
    signature = alice.sign(session_bind_message(nonce, token))
    service.nodes.bind(token, "ipv4:10.0.0.9:4000", nonce, signature)
    assert service.nodes.authenticate(token, "ipv4:10.0.0.9:4000").node_id == alice.node_id
    _refusal(lambda: service.nodes.bind(token, "ipv4:10.0.0.9:4001", nonce, signature))  # used up
    _refusal(lambda: service.nodes.authenticate(token, "ipv4:10.0.0.7:5000"))
    with pytest.raises(Unauthenticated):  # a token never issued gets no nonce at all
        service.nodes.authenticate(token + "x", "ipv4:10.0.0.9:4000")
    with pytest.raises(Unauthenticated) as unknown:
        service.nodes.bind(token + "x", "ipv4:10.0.0.9:4000", b"", b"")
    assert not isinstance(unknown.value, SessionUnbound)


def test_a_heartbeat_answered_from_memory_checks_the_connection_too(service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """The in-memory heartbeat (a cached session, no database) refuses an unbound connection,
    like every other call."""
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _, token = register_node(service, alice, MINI, (MODEL,), "alice")
    now = service.clock.now_ms()
    assert service.nodes.heartbeat_in_memory(token, "in-process", HeartbeatReport(0)) == now
    _refusal(lambda: service.nodes.heartbeat_in_memory(token, "ipv4:10.0.0.9:4000", HeartbeatReport(0)))
    bind_connection(service, alice, token, "ipv4:10.0.0.9:4000")
    assert service.nodes.heartbeat_in_memory(token, "ipv4:10.0.0.9:4000", HeartbeatReport(0)) == now


def test_a_token_stolen_and_replayed_on_another_connection_is_refused(coordinator: RunningCoordinator,
                                                                      tmp_path: Path) -> None:
    """The right token, on an eavesdropper's own connection: UNAUTHENTICATED with a nonce that
    only the node's key can sign; the node's own session goes on working."""
    address = f"127.0.0.1:{coordinator.port}"
    node = CoordinatorClient(address, CoordinatorTrust(insecure=True))
    try:
        node.register(load_or_create_identity(tmp_path / "n.pem"), MINI, (MODEL,), "", "n", 1)
        node.heartbeat(0)
        mallory = load_or_create_identity(tmp_path / "mallory.pem")
        with grpc.insecure_channel(address, options=[OWN_CONNECTION]) as channel:
            stub = node_pb2_grpc.NodeServiceStub(channel)
            stolen = (("x-mlxnet-session", node.session_token),)
            calls = {
                "Heartbeat": lambda: stub.Heartbeat(node_pb2.HeartbeatRequest(), metadata=stolen, timeout=10),
                "Leave": lambda: stub.Leave(node_pb2.LeaveRequest(reason="x"), metadata=stolen, timeout=10),
                "ReportResult": lambda: stub.ReportResult(node_pb2.ReportResultRequest(
                    job_id="j", failure_reason="x"), metadata=stolen, timeout=10),
                "ReceiveAssignments": lambda: next(stub.ReceiveAssignments(
                    node_pb2.ReceiveAssignmentsRequest(), metadata=stolen, timeout=10)),
            }
            for name, call in calls.items():
                with pytest.raises(grpc.RpcError) as refused:
                    call()
                assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED, name
                assert "not bound to this connection" in (refused.value.details() or ""), name
            nonce = dict(refused.value.trailing_metadata() or ())[BIND_NONCE_METADATA_KEY]
            with pytest.raises(grpc.RpcError) as forged:  # the thief signs with its own key
                stub.BindSession(node_pb2.BindSessionRequest(
                    nonce=nonce, signature=mallory.sign(session_bind_message(nonce, node.session_token))),
                    metadata=stolen, timeout=10)
            assert forged.value.code() is grpc.StatusCode.PERMISSION_DENIED
            with pytest.raises(grpc.RpcError) as still:
                stub.Heartbeat(node_pb2.HeartbeatRequest(), metadata=stolen, timeout=10)
            assert still.value.code() is grpc.StatusCode.UNAUTHENTICATED
        node.heartbeat(0)  # and the node's own session still works
    finally:
        node.close()


def _retrying(call):  # type: ignore[no-untyped-def]
    """The call once the restarted coordinator answers (the channel reconnects on its own)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return call()
        except CoordinatorUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_honest_agent_binds_again_after_a_coordinator_restart(database_url: str, tmp_path: Path) -> None:
    """A restarted coordinator knows the session (the database) but no connection: the agent's
    next heartbeat and assignment stream are refused once, it signs the nonce, and they go on."""
    first = start(CoordinatorConfig(database_url=database_url))
    port = first.port
    node = CoordinatorClient(f"127.0.0.1:{port}", CoordinatorTrust(insecure=True))
    try:
        node.register(load_or_create_identity(tmp_path / "n.pem"), MINI, (MODEL,), "", "n", 1)
        token = node.session_token
        node.heartbeat(0)
        first.stop(grace_s=0)
        again = start(CoordinatorConfig(database_url=database_url), port=port)
        try:
            assert len(again.service.nodes.bindings) == 0
            ended: list[BaseException] = []

            def listen() -> None:  # the assignment stream first: refused once, bound, open again
                try:
                    for _ in node.assignments():
                        pass
                except Exception as error:  # noqa: BLE001 (the test reads it)
                    ended.append(error)

            _retrying(lambda: node.heartbeat(0))  # the channel is up again
            assert len(again.service.nodes.bindings) == 1  # bound by the heartbeat, by itself
            assert node.session_token == token  # no new registration
            again.stop(grace_s=0)
            again = start(CoordinatorConfig(database_url=database_url), port=port)
            listener = threading.Thread(target=listen, daemon=True)
            deadline = time.monotonic() + 30
            listener.start()
            while not again.server.streams.count("ReceiveAssignments") and time.monotonic() < deadline:
                listener.join(0.1)
                if ended and isinstance(ended[-1], CoordinatorUnavailable):  # not up yet: listen again
                    ended.clear()
                    listener = threading.Thread(target=listen, daemon=True)
                    listener.start()
            assert ended == [] and again.server.streams.count("ReceiveAssignments") == 1
            assert len(again.service.nodes.bindings) == 1
            node.heartbeat(0)  # the stream bound the connection: no refusal now
        finally:
            again.stop(grace_s=0)
    finally:
        node.close()
        first.stop(grace_s=0)


def test_another_coordinators_news_of_a_node_drops_its_cached_session(service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """Sessions stay cached for minutes, so a node that registered again elsewhere (a new token)
    must not keep its old one here: the relayed fleet news drops it, and the next call reads."""
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _, token = register_node(service, alice, MINI, (MODEL,), "alice")
    assert len(service.nodes.sessions) == 1
    service.core.hear_relayed(fleet_topic(alice.node_id))
    assert len(service.nodes.sessions) == 0
    assert service.nodes.authenticate(token).node_id == alice.node_id  # read again, still bound
    assert len(service.nodes.sessions) == 1


def test_the_agent_binds_each_new_connection_by_itself(coordinator: RunningCoordinator, tmp_path: Path) -> None:
    """A unary call and a token stream, each first on a connection of its own: refused once,
    bound with the node's key, then answered by the call's own logic, the caller none the wiser."""
    address = f"127.0.0.1:{coordinator.port}"
    node = CoordinatorClient(address, CoordinatorTrust(insecure=True))
    bindings = coordinator.service.nodes.bindings

    def new_connection() -> None:
        node._stub_value = node_pb2_grpc.NodeServiceStub(grpc.insecure_channel(address, options=[OWN_CONNECTION]))

    def connections() -> int:
        return len(bindings._bound[token_sha256(node.session_token)])

    try:
        node.register(load_or_create_identity(tmp_path / "n.pem"), MINI, (MODEL,), "", "n", 1)
        assert connections() == 1
        new_connection()
        node.heartbeat(0)
        assert connections() == 2
        new_connection()
        with pytest.raises(CallRejected, match="NOT_FOUND: job job-none does not exist"):  # past the binding
            node.stream_tokens("job-none", iter([(0, (1,), "a")]))
        assert connections() == 3
        new_connection()
        with pytest.raises(CallRejected, match="NOT_FOUND"):
            node.report_failure("job-none", "x")
        assert connections() == 4
    finally:
        node.close()


class _AlwaysFreshNonce(grpc.RpcError):
    """What a coordinator answers a bind sent on a connection other than its nonce's."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAUTHENTICATED

    def trailing_metadata(self):  # type: ignore[no-untyped-def]
        return ((BIND_NONCE_METADATA_KEY, b"\x07" * 32),)


class _StubRefusingEveryBind:
    def __init__(self) -> None:
        self.binds = 0

    def BindSession(self, request, timeout, metadata):  # type: ignore[no-untyped-def]  # noqa: N802
        self.binds += 1
        raise _AlwaysFreshNonce()


def test_a_bind_that_meets_a_new_nonce_every_time_gives_up_with_the_refusal(tmp_path: Path) -> None:
    """A connection that changes under each try (a flapping link) ends in the coordinator's own
    UNAUTHENTICATED, which the agent answers by registering again; never a crash of the agent."""
    stub = _StubRefusingEveryBind()
    with pytest.raises(_AlwaysFreshNonce):
        bind_session(stub, load_or_create_identity(tmp_path / "n.pem"), "token")  # type: ignore[arg-type]
    assert stub.binds == 3
