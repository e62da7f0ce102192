"""Operator keys: the key that opens an operator's own page in MLX World, and their regions.

A key reads `mlxo_<key_id>_<secret>` (consumer API keys read `mlxk_...`, so one
can never be mistaken for the other). Only sha256 of the whole key is stored. A
key shows one operator's nodes, jobs, earnings and proofs, and lets the operator
declare each Mac's region; it cannot submit jobs or spend anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from coordinator.errors import InvalidRequest, NotFound, PermissionDenied, Unauthenticated
from coordinator.storage import key_rows
from coordinator.storage.tables import nodes
from coordinator.world.fleet import REGION_CHARS_MAX
from coordinator.world.tables import node_regions, operator_keys
from ledger.api import valid_id

KEY_PREFIX = "mlxo_"
KEY_ID_HEX_CHARS = 16
KEY_CHARS_MAX = 128
LABEL_CHARS_MAX = key_rows.LABEL_CHARS_MAX
KEYS_LISTED_MAX = 1_000
_KEY_PATTERN = re.compile(r"^mlxo_([0-9a-f]{%d})_[A-Za-z0-9_-]{20,100}$" % KEY_ID_HEX_CHARS)
_REGION_PATTERN = re.compile(r"^[\w][\w .,/()'-]{0,%d}$" % (REGION_CHARS_MAX - 1))


@dataclass(frozen=True)
class OperatorKey:
    key_id: str
    operator_id: str
    label: str
    created_at_ms: int
    revoked_at_ms: int | None


def _key_from_row(row) -> OperatorKey:  # type: ignore[no-untyped-def]
    return OperatorKey(row.key_id, row.operator_id, row.label, row.created_at_ms, row.revoked_at_ms)


def create_operator_key(session: Session, operator_id: str, label: str,
                        now_ms: int) -> tuple[OperatorKey, str]:
    """A new key for the operator; returns it with the key text, which is never stored."""
    if not valid_id(operator_id):
        raise InvalidRequest(f"operator id {operator_id[:40]!r} must be 1-128 printable characters "
                             "without spaces (the --operator a node was started with)",
                             param="operator")
    key_id, key = key_rows.new_key(KEY_PREFIX, KEY_ID_HEX_CHARS, _KEY_PATTERN, KEY_CHARS_MAX, label)
    session.execute(insert(operator_keys).values(
        key_id=key_id, secret_sha256=key_rows.key_sha256(key), operator_id=operator_id, label=label,
        created_at_ms=now_ms, revoked_at_ms=None))
    return OperatorKey(key_id, operator_id, label, now_ms, None), key


def revoke_operator_key(session: Session, key_id: str, now_ms: int) -> OperatorKey:
    """Revoke a key (again is harmless); pages open with it stop working at their next request."""
    return key_rows.revoke(session, operator_keys, key_id, now_ms, _key_from_row,
                           f"no operator key has id {key_id!r}; `mlxnet keys list --operators` shows them")


def operator_keys_of(session: Session, operator_id: str | None = None) -> list[OperatorKey]:
    return key_rows.keys_of(session, operator_keys.c.operator_id, operator_id, _key_from_row,
                            limit=KEYS_LISTED_MAX)


def authenticate_operator(session: Session, key: str | None) -> OperatorKey:
    """The live operator key matching `key`; Unauthenticated for a missing, unknown or revoked one."""
    if not key:
        raise Unauthenticated("an operator key is required: send `Authorization: Bearer <key>` "
                              "(create one with `mlxnet keys create --operator NAME`)")
    if len(key) > KEY_CHARS_MAX or not _KEY_PATTERN.match(key):
        raise Unauthenticated("the operator key is malformed: operator keys look like mlxo_<id>_<secret>")
    row = session.execute(select(operator_keys)
                          .where(operator_keys.c.secret_sha256 == key_rows.key_sha256(key))).first()
    if row is None:
        raise Unauthenticated("the operator key is not valid: check it was copied whole")
    if row.revoked_at_ms is not None:
        raise Unauthenticated(f"the operator key {row.key_id} was revoked; create a new one")
    return _key_from_row(row)


def validate_region(region: str) -> str:
    region = region.strip()
    if not _REGION_PATTERN.match(region):
        raise InvalidRequest(f"region must be 1-{REGION_CHARS_MAX} letters, digits, spaces or "
                             "- , . / ( ) ' and start with a letter or digit, e.g. \"Europe/Lisbon\"",
                             param="region")
    return region


def set_region(session: Session, operator_id: str, node_id: str, region: str | None,
               now_ms: int) -> None:
    """Declare (or with None, clear) the region of one of the operator's own Macs."""
    owner = session.execute(select(nodes.c.operator_id).where(nodes.c.node_id == node_id)).scalar()
    if owner is None:
        raise NotFound(f"node {node_id} is not registered")
    if owner != operator_id:
        raise PermissionDenied(f"node {node_id} belongs to another operator; "
                               "use that operator's key")
    session.execute(node_regions.delete().where(node_regions.c.node_id == node_id))
    if region is not None:
        session.execute(insert(node_regions).values(node_id=node_id, region=validate_region(region),
                                                    updated_at_ms=now_ms))
