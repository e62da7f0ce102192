"""Ed25519 signature checks shared by every party that verifies a node's word."""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from contracts.ids import NodeId

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64


def register_challenge(node_id: NodeId, timestamp_ms: int) -> bytes:
    """The bytes a node signs to prove it holds its key when it registers."""
    return b"mlxnet.register.v1\x00" + node_id.encode() + b"\x00" + str(timestamp_ms).encode()


def signature_is_valid(public_key_raw: bytes, message: bytes, signature: bytes) -> bool:
    if len(public_key_raw) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_key_raw).verify(signature, message)
    except InvalidSignature:
        return False
    return True
