"""A node's identity is bound to everything it says (issue 25): the registration signature
covers the whole request and a single-use nonce, and an operator proves itself with its key.

Each attack goes through the same edge conversion the gRPC servicer uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.errors import InvalidRequest, PermissionDenied, Unauthenticated
from coordinator.rpc.convert import registration_from_pb
from coordinator.service import CoordinatorService
from coordinator.storage import node_rows
from coordinator.storage.database import Database, upgrade_schema
from coordinator.world.operator_keys import revoke_operator_key
from node_agent.coordinator_client import register_request
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import Identity, load_or_create_identity
from protos.mlxnet.v1 import node_pb2
from tests.coordinator.verification.test_outcomes import MODEL, FakeClock
from tests.node_registration import operator_key_for, signed_registration

MINI = simulated_profile("m4-pro-64")


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    upgrade_schema(database_url)
    db = Database(database_url)
    yield CoordinatorService(db, FakeClock(), CoordinatorConfig(database_url=database_url))  # type: ignore[arg-type]
    db.dispose()


@pytest.fixture
def alice(tmp_path: Path) -> Identity:
    return load_or_create_identity(tmp_path / "alice.pem")


def _request(service: CoordinatorService, identity: Identity, operator: str = "alice",
             key: str | None = None) -> node_pb2.RegisterRequest:
    nonce, _ = service.nodes.challenge(identity.public_key_raw)
    return register_request(identity, nonce, MINI, (MODEL,), operator, "n", 1,
                            operator_key=operator_key_for(service, operator) if key is None else key)


def _operator_of(service: CoordinatorService, node_id: str) -> str:
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    return node.operator_id


def test_a_signed_registration_with_its_operators_key_registers(service: CoordinatorService,
                                                                alice: Identity) -> None:
    node_id, token = service.nodes.register(registration_from_pb(_request(service, alice)))
    assert node_id == alice.node_id and service.nodes.authenticate(token).node_id == node_id
    assert _operator_of(service, node_id) == "alice"


def test_a_replayed_registration_is_refused(service: CoordinatorService, alice: Identity) -> None:
    request = _request(service, alice)
    service.nodes.register(registration_from_pb(request))
    with pytest.raises(PermissionDenied, match="nonce is unknown or already used"):
        service.nodes.register(registration_from_pb(request))


@pytest.mark.parametrize("change", ["operator", "chip", "models", "lending"])
def test_a_replay_with_any_field_changed_does_not_verify(service: CoordinatorService, alice: Identity,
                                                         change: str) -> None:
    request = _request(service, alice)
    if change == "operator":
        request.operator_id, request.operator_key = "mallory", operator_key_for(service, "mallory")
    elif change == "chip":
        request.hardware.chip, request.hardware.chip_tier = "Apple M3 Ultra", "ultra"
    elif change == "models":
        request.models[0].parameter_count = 1
    else:
        request.lending.mode = "dedicated"
    with pytest.raises(PermissionDenied, match="signature does not verify"):
        service.nodes.register(registration_from_pb(request))


def test_a_registration_without_a_nonce_or_with_anothers_nonce_is_refused(
        service: CoordinatorService, alice: Identity, tmp_path: Path) -> None:
    unsigned = register_request(alice, b"", MINI, (MODEL,), "alice", "n", 1,
                                operator_key=operator_key_for(service, "alice"))
    with pytest.raises(InvalidRequest, match="needs a nonce"):
        service.nodes.register(registration_from_pb(unsigned))
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    stolen, _ = service.nodes.challenge(alice.public_key_raw)
    request = register_request(mallory, stolen, MINI, (MODEL,), mallory.node_id, "n", 1)
    with pytest.raises(PermissionDenied, match="issued for another public key"):
        service.nodes.register(registration_from_pb(request))


def test_an_expired_nonce_is_refused(service: CoordinatorService, alice: Identity) -> None:
    request = _request(service, alice)
    service.clock.ms += 61_000  # type: ignore[attr-defined]
    with pytest.raises(PermissionDenied, match="expired"):
        service.nodes.register(registration_from_pb(request))


def test_an_operator_is_not_claimed_without_its_key(service: CoordinatorService,
                                                   alice: Identity) -> None:
    with pytest.raises(PermissionDenied, match="operator 'alice' needs its operator key"):
        service.nodes.register(registration_from_pb(_request(service, alice, key="")))
    with pytest.raises(PermissionDenied, match="belongs to 'bob'"):
        service.nodes.register(registration_from_pb(
            _request(service, alice, key=operator_key_for(service, "bob"))))
    with pytest.raises(Unauthenticated, match="not valid"):
        service.nodes.register(registration_from_pb(_request(service, alice, key="mlxo_" + "0" * 40)))


def test_a_revoked_operator_key_registers_nothing(service: CoordinatorService, alice: Identity) -> None:
    key = operator_key_for(service, "carol")
    with service.db.transaction() as session:
        revoke_operator_key(session, key.split("_")[1], service.clock.now_ms())
    with pytest.raises(Unauthenticated, match="revoked"):
        service.nodes.register(registration_from_pb(_request(service, alice, "carol", key)))


def test_a_node_without_a_key_is_its_own_operator(service: CoordinatorService, alice: Identity) -> None:
    for claimed in ("", alice.node_id):
        registration = signed_registration(service, alice, MINI, (MODEL,), claimed, operator_key="")
        node_id, _ = service.nodes.register(registration)
        assert _operator_of(service, node_id) == alice.node_id
