"""An Ed25519 private key in a PEM file: created on first use, readable by its owner only.

The node's identity and the coordinator's ledger key are both kept this way.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


class KeyFileError(OSError):
    """The key file exists but is unsafe or unreadable."""


def public_key_raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def load_key(path: Path) -> Ed25519PrivateKey:
    """The key in an existing file; KeyFileError when others can read it or it holds something else."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeyFileError(f"{path} is readable by others (mode {mode:o}); run `chmod 600 {path}`")
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} does not hold an Ed25519 private key")
    return key


def load_or_create_key(path: Path) -> tuple[Ed25519PrivateKey, bool]:
    """(the key, whether it was created now)."""
    if path.exists():
        return load_key(path), False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    # O_EXCL with 0600 from the start: the key is never briefly world-readable.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    return key, True


class KeySigner:
    """Signs with a private key and tells its public half (the shape ledger.head_signatures takes)."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_key_raw = public_key_raw(key)

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)


def signer_from_file(path: Path) -> KeySigner:
    """The key in the file as a signer, creating the file on first use."""
    return KeySigner(load_or_create_key(path)[0])
