"""How a node or a consumer decides to trust a coordinator's TLS certificate.

A certificate is trusted when a CA this machine trusts signed it for the host, or when its
SHA-256 fingerprint matches the one pinned (given by the operator, or remembered after a
node's first join, as SSH remembers a host key). Plaintext is only for loopback, and only
when asked for. What is refused raises from one small tree:

    TransportRefused
    ├── PlaintextRefused        plaintext asked for an address that is not loopback
    ├── CertificateChanged      the certificate is not the pinned one: maybe an interception
    └── UntrustedCertificate    no CA vouches for it and nothing is pinned

The fetch of a certificate is injected, so the decision is tested without a network.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

FETCH_TIMEOUT_S = 10.0
FINGERPRINT_PREFIX = "SHA256:"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class TransportRefused(Exception):
    """The connection would not be private or not be to the coordinator meant."""


class PlaintextRefused(TransportRefused):
    pass


class CertificateChanged(TransportRefused):
    def __init__(self, address: str, pinned: str, seen: str) -> None:
        super().__init__(
            f"the coordinator at {address} presented a certificate with fingerprint {seen}, "
            f"not the pinned {pinned}. Someone may be intercepting the connection; if the "
            "coordinator's operator really replaced its certificate, pin the new fingerprint "
            "with --coordinator-fingerprint")
        self.pinned = pinned
        self.seen = seen


class UntrustedCertificate(TransportRefused):
    def __init__(self, address: str, seen: str, reason: str) -> None:
        super().__init__(
            f"the coordinator at {address} has a certificate no trusted CA vouches for "
            f"({reason}); if its operator confirms the fingerprint {seen}, pin it with "
            f"--coordinator-fingerprint {seen}")
        self.seen = seen


def certificate_fingerprint(certificate_der: bytes) -> str:
    """`SHA256:AB:CD:...`, as `openssl x509 -noout -fingerprint -sha256` prints it."""
    digest = hashlib.sha256(certificate_der).hexdigest().upper()
    return FINGERPRINT_PREFIX + ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def normalize_fingerprint(text: str) -> str:
    """A fingerprint as typed (any case, with or without colons or prefix), in canonical form."""
    cleaned = text.strip()
    for prefix in ("sha256 fingerprint=", "sha256:", "sha256="):
        if cleaned.lower().startswith(prefix):
            cleaned = cleaned[len(prefix):]
    digits = cleaned.replace(":", "").replace(" ", "").lower()
    if not _HEX64.fullmatch(digits):
        raise ValueError("a coordinator fingerprint is 64 hex digits (SHA-256), colons "
                         "allowed, e.g. SHA256:AB:CD:...")
    digest = digits.upper()
    return FINGERPRINT_PREFIX + ":".join(digest[i:i + 2] for i in range(0, 64, 2))


def split_address(address: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) into its host and port."""
    host, separator, port = address.rpartition(":")
    if not separator or not port.isascii() or not port.isdigit():
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.removeprefix("[").removesuffix("]"), int(port)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def certificate_names(certificate_der: bytes) -> tuple[str, ...]:
    """The DNS names and IP addresses the certificate is for, DNS names first."""
    certificate = x509.load_der_x509_certificate(certificate_der)
    try:
        alternatives = certificate.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
        dns = alternatives.get_values_for_type(x509.DNSName)
        ips = [str(ip) for ip in alternatives.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        dns, ips = [], []
    common = [str(a.value) for a in certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)]
    return tuple(dict.fromkeys([*dns, *common, *ips]))


def certificate_pem(certificate_der: bytes) -> bytes:
    return x509.load_der_x509_certificate(certificate_der).public_bytes(Encoding.PEM)


@dataclass(frozen=True)
class PeerCertificate:
    der: bytes
    ca_verified: bool  # a trusted CA signed it for the host we asked for
    problem: str = ""  # why it is not CA-verified


Fetch = Callable[[str, int, "Path | None", bool], PeerCertificate]


def fetch_certificate(host: str, port: int, ca_file: Path | None = None, ask_ca: bool = True,
                      timeout_s: float = FETCH_TIMEOUT_S) -> PeerCertificate:
    """The certificate the server presents, and (when ask_ca) whether a CA we trust vouches for it.

    Raises OSError when the server cannot be reached or speaks no TLS.
    """
    problem = "not asked"
    if ask_ca:
        verified = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        verified.set_alpn_protocols(["h2"])
        try:
            return PeerCertificate(_handshake(host, port, verified, timeout_s), True)
        except ssl.SSLCertVerificationError as error:
            problem = error.verify_message or str(error)
    unverified = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    unverified.set_alpn_protocols(["h2"])
    return PeerCertificate(_handshake(host, port, unverified, timeout_s), False, problem)


def _handshake(host: str, port: int, context: ssl.SSLContext, timeout_s: float) -> bytes:
    with socket.create_connection((host, port), timeout=timeout_s) as raw:
        with context.wrap_socket(raw, server_hostname=host) as secured:
            der = secured.getpeercert(binary_form=True)
            try:
                secured.unwrap()  # close_notify: the server sees a clean goodbye, not an error
            except (OSError, ssl.SSLError):
                pass  # the certificate is all this connection was for
    if der is None:
        raise OSError(f"{host}:{port} presented no certificate")
    return der


@dataclass(frozen=True)
class CoordinatorTrust:
    """What the operator allowed: a pin, a CA file, first-use trust, or plaintext on loopback."""

    fingerprint: str = ""  # pinned, canonical (normalize_fingerprint)
    ca_file: Path | None = None  # trust this CA bundle instead of the system's
    trust_on_first_use: bool = False  # a node without a pin accepts and remembers what it sees
    insecure: bool = False  # plaintext; loopback only

    def __post_init__(self) -> None:
        if self.fingerprint:
            assert self.fingerprint == normalize_fingerprint(self.fingerprint), self.fingerprint


@dataclass(frozen=True)
class TrustDecision:
    """How to open the channel: plaintext, or TLS with these roots and name."""

    basis: str  # "plaintext", "ca", "pinned" or "first use"
    fingerprint: str = ""
    root_pem: bytes | None = None  # None: the system's CA roots (or ca_file's)
    server_name: str = ""  # the name to check in the certificate, when not the address's host


def system_roots_pem() -> bytes | None:
    """The system CA bundle, for clients (gRPC) that do not read it themselves; None if unknown."""
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_bytes()
    return None


def decide(address: str, trust: CoordinatorTrust, fetch: Fetch = fetch_certificate) -> TrustDecision:
    """Whether and how to trust the coordinator at address; raises TransportRefused."""
    host, port = split_address(address)
    if trust.insecure:
        if not is_loopback(host):
            raise PlaintextRefused(f"plaintext to {address} refused: --insecure is only for "
                                   "loopback (127.0.0.1, ::1, localhost)")
        return TrustDecision("plaintext")
    peer = fetch(host, port, trust.ca_file, not trust.fingerprint)  # a pin needs no CA
    seen = certificate_fingerprint(peer.der)
    if trust.fingerprint:
        if seen != trust.fingerprint:
            raise CertificateChanged(address, trust.fingerprint, seen)
        names = certificate_names(peer.der)
        name = "" if host in names or not names else names[0]
        return TrustDecision("pinned", seen, certificate_pem(peer.der), name)
    if peer.ca_verified:
        roots = trust.ca_file.read_bytes() if trust.ca_file else system_roots_pem()
        return TrustDecision("ca", seen, roots)
    if trust.trust_on_first_use:
        names = certificate_names(peer.der)
        name = "" if host in names or not names else names[0]
        return TrustDecision("first use", seen, certificate_pem(peer.der), name)
    raise UntrustedCertificate(address, seen, peer.problem)
