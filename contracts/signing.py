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
