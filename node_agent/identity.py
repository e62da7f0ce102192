"""The node's Ed25519 identity: created on first start, kept readable by its owner only."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contracts.ids import NodeId, node_id_from_public_key
from contracts.keyfile import KeyFileError, load_or_create_key, public_key_raw

log = logging.getLogger(__name__)

IdentityFileError = KeyFileError  # the key file exists but is unsafe or unreadable


@dataclass(frozen=True)
class Identity:
    private_key: Ed25519PrivateKey
    public_key_raw: bytes
    node_id: NodeId

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)


def _from_private(private_key: Ed25519PrivateKey) -> Identity:
    raw = public_key_raw(private_key)
    return Identity(private_key, raw, node_id_from_public_key(raw))


def load_or_create_identity(path: Path) -> Identity:
    key, created = load_or_create_key(path)
    identity = _from_private(key)
    if created:
        log.info("created node identity %s at %s", identity.node_id, path)
    return identity
