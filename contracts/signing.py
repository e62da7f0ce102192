"""Ed25519 signature checks shared by every party that verifies a node's word."""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64


def signature_is_valid(public_key_raw: bytes, message: bytes, signature: bytes) -> bool:
    if len(public_key_raw) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_key_raw).verify(signature, message)
    except InvalidSignature:
        return False
    return True


BIND_NONCE_BYTES = 32
SESSION_METADATA_KEY = "x-mlxnet-session"
# Trailing metadata of an UNAUTHENTICATED call whose session is not bound to its connection:
# the nonce the node signs (session_bind_message) in BindSession to bind it there.
BIND_NONCE_METADATA_KEY = "x-mlxnet-bind-nonce-bin"


def session_bind_message(nonce: bytes, session_token: str) -> bytes:
    """What a node signs to use its session on a new connection: the coordinator's nonce, issued
    on that connection, and the token. Without the node's key a copied token works nowhere else."""
    return b"mlxnet.session-bind.v1\0" + nonce + b"\0" + session_token.encode()
