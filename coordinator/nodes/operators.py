"""Which operator a node is lent by: proven with the operator's key, never just claimed.

Operator keys (mlxo_..., `mlxnet keys create --operator NAME`) are made and revoked in
MLX World (coordinator/world/operator_keys.py); a registration presents one, and only
its sha256 is looked up here. A node without a key is its own operator.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from coordinator.errors import PermissionDenied, Unauthenticated
from coordinator.storage import key_rows

OPERATOR_KEY_PREFIX = "mlxo_"
OPERATOR_KEY_CHARS_MAX = 128
# world/tables.py owns the table; this room reads one row of it by the key's hash.
_KEY_OWNER = text("SELECT operator_id, revoked_at_ms, key_id FROM operator_keys "
                  "WHERE secret_sha256 = :secret_sha256")


def proven_operator(session: Session, node_id: str, claimed: str, operator_key: str) -> str:
    """The operator the node registers under; refused when the claim is not proven."""
    if not operator_key:
        if claimed and claimed != node_id:
            raise PermissionDenied(
                f"operator {claimed[:64]!r} needs its operator key: pass --operator-key mlxo_... "
                "(`mlxnet keys create --operator NAME` on the coordinator makes one); without a "
                "key a node is its own operator (leave --operator out)")
        return node_id
    if len(operator_key) > OPERATOR_KEY_CHARS_MAX or not operator_key.startswith(OPERATOR_KEY_PREFIX):
        raise Unauthenticated("the operator key is malformed: operator keys look like mlxo_<id>_<secret>")
    row = session.execute(_KEY_OWNER, {"secret_sha256": key_rows.key_sha256(operator_key)}).first()
    if row is None:
        raise Unauthenticated("the operator key is not valid: check it was copied whole")
    operator_id, revoked_at_ms, key_id = row
    if revoked_at_ms is not None:
        raise Unauthenticated(f"the operator key {key_id} was revoked; create a new one")
    if claimed and claimed != operator_id:
        raise PermissionDenied(f"the operator key belongs to {operator_id!r}, not {claimed[:64]!r}")
    return str(operator_id)
