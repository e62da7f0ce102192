"""The node's Ed25519 identity: created on first start, kept readable by its owner only."""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contracts.ids import NodeId, node_id_from_public_key

log = logging.getLogger(__name__)


class IdentityFileError(OSError):
    """The key file exists but is unsafe or unreadable."""


@dataclass(frozen=True)
class Identity:
    private_key: Ed25519PrivateKey
    public_key_raw: bytes
    node_id: NodeId

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)


def _from_private(private_key: Ed25519PrivateKey) -> Identity:
    raw = private_key.public_key().public_bytes(serialization.Encoding.Raw,
                                                serialization.PublicFormat.Raw)
    return Identity(private_key, raw, node_id_from_public_key(raw))


def load_or_create_identity(path: Path) -> Identity:
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise IdentityFileError(f"{path} is readable by others (mode {mode:o}); "
                                    f"run `chmod 600 {path}`")
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise IdentityFileError(f"{path} does not hold an Ed25519 private key")
        return _from_private(key)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    # O_EXCL with 0600 from the start: the key is never briefly world-readable.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    identity = _from_private(key)
    log.info("created node identity %s at %s", identity.node_id, path)
    return identity
