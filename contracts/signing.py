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


SESSION_PROOF_WINDOW_MS = 300_000  # a proof's time may differ from the coordinator's by this much


def session_proof_message(session_token: str, at_ms: int) -> bytes:
    """What a node signs with its key on every call: its session token, bound to the key that
    registered it (a token copied without the key is refused), and the time, so a proof goes stale."""
    return b"mlxnet.session.v1\0" + session_token.encode() + b"\0" + str(at_ms).encode()
