"""The coordinator's TLS identity: the operator's certificate, or one it makes itself.

Without `--tls-cert`/`--tls-key` the coordinator makes a self-signed certificate on its
first start and keeps it in its data dir (the key readable by its owner only), so its
fingerprint stays the same across restarts and nodes that pinned it keep trusting it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from contracts.tls import certificate_fingerprint

SELF_SIGNED_NAME = "mlxnet-coordinator"  # always in a self-signed certificate, for pinned clients
SELF_SIGNED_VALID_DAYS = 3650  # trusted by its pin, not its dates; a new one changes the pin
CERT_FILE_NAME = "cert.pem"
KEY_FILE_NAME = "key.pem"
TLS_DIR_NAME = "tls"


class TlsSetupError(Exception):
    """The certificate or key cannot be used; the message says which and why."""


@dataclass(frozen=True)
class ServerTls:
    cert_path: Path
    key_path: Path
    cert_pem: bytes  # the chain, leaf first
    key_pem: bytes
    fingerprint: str  # of the leaf certificate
    self_signed: bool


def load(cert_path: Path, key_path: Path, self_signed: bool = False) -> ServerTls:
    """The operator's certificate chain and key (PEM), checked to belong together."""
    try:
        cert_pem, key_pem = cert_path.read_bytes(), key_path.read_bytes()
        chain = x509.load_pem_x509_certificates(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (OSError, ValueError, TypeError) as error:
        raise TlsSetupError(f"cannot use the certificate {cert_path} and key {key_path}: "
                            f"{error}") from error
    leaf_public = chain[0].public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    key_public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if leaf_public != key_public:
        raise TlsSetupError(f"the key {key_path} is not the key of the certificate {cert_path}")
    fingerprint = certificate_fingerprint(chain[0].public_bytes(serialization.Encoding.DER))
    return ServerTls(cert_path, key_path, cert_pem, key_pem, fingerprint, self_signed)


def load_or_create(data_dir: Path, host: str, now: datetime.datetime | None = None) -> ServerTls:
    """The self-signed identity kept in data_dir/tls, made on the first start."""
    directory = data_dir / TLS_DIR_NAME
    cert_path, key_path = directory / CERT_FILE_NAME, directory / KEY_FILE_NAME
    if not cert_path.exists() or not key_path.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        cert_pem, key_pem = self_signed_certificate(_names(host), now)
        _write_private(key_path, key_pem)
        cert_path.write_bytes(cert_pem)
    return load(cert_path, key_path, self_signed=True)


def _write_private(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def _names(host: str) -> tuple[str, ...]:
    names = [SELF_SIGNED_NAME, "localhost", "127.0.0.1", "::1", socket.gethostname()]
    if host and host not in ("0.0.0.0", "::", ""):
        names.append(host)
    return tuple(dict.fromkeys(names))


def self_signed_certificate(names: tuple[str, ...],
                            now: datetime.datetime | None = None) -> tuple[bytes, bytes]:
    """A P-256 certificate and key (PEM) for these DNS names and IP addresses; names[0] is its CN."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = now or datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, names[0])])
    alternatives: list[x509.GeneralName] = []
    for name in names:
        try:
            alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternatives.append(x509.DNSName(name))
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem
