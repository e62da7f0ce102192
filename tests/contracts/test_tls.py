"""Trusting a coordinator's certificate: a pin, a CA, first use, or plaintext on loopback only."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from contracts.tls import (
    CertificateChanged, CoordinatorTrust, PeerCertificate, PlaintextRefused, UntrustedCertificate,
    certificate_fingerprint, decide, is_loopback, normalize_fingerprint, split_address,
)
from coordinator.tls import self_signed_certificate

CERT_PEM, _ = self_signed_certificate(("mlxnet-coordinator", "localhost", "127.0.0.1"))
CERT_DER = x509.load_pem_x509_certificate(CERT_PEM).public_bytes(Encoding.DER)
FINGERPRINT = certificate_fingerprint(CERT_DER)


class FakeServer:
    """Presents one certificate; records what was asked, and whether a CA vouches for it."""

    def __init__(self, ca_verified: bool = False) -> None:
        self.ca_verified = ca_verified
        self.fetched: list[tuple[str, int, bool]] = []

    def __call__(self, host: str, port: int, ca_file: Path | None, ask_ca: bool) -> PeerCertificate:
        self.fetched.append((host, port, ask_ca))
        return PeerCertificate(CERT_DER, self.ca_verified and ask_ca,
                               "" if self.ca_verified else "self-signed certificate")


def test_fingerprints_are_canonical_whatever_their_spelling() -> None:
    assert FINGERPRINT.startswith("SHA256:") and len(FINGERPRINT) == 7 + 95
    bare = FINGERPRINT.removeprefix("SHA256:").replace(":", "").lower()
    for spelling in (bare, bare.upper(), FINGERPRINT.lower(), f"sha256 Fingerprint={FINGERPRINT[7:]}"):
        assert normalize_fingerprint(spelling) == FINGERPRINT
    for bad in ("", "SHA256:AB", bare[:-1] + "g", bare + "00"):
        with pytest.raises(ValueError, match="64 hex digits"):
            normalize_fingerprint(bad)


def test_addresses_and_loopback() -> None:
    assert split_address("[::1]:50051") == ("::1", 50051)
    assert split_address("coord.example:443") == ("coord.example", 443)
    with pytest.raises(ValueError):
        split_address("no-port")
    with pytest.raises(ValueError):
        split_address("host:５０")  # unicode digits are not a port
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.9.9.9", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("10.0.0.1", "0.0.0.0", "example.com", "::"))


def test_plaintext_only_to_loopback_and_never_fetches() -> None:
    server = FakeServer()
    assert decide("127.0.0.1:1", CoordinatorTrust(insecure=True), server).basis == "plaintext"
    with pytest.raises(PlaintextRefused, match="only for loopback"):
        decide("203.0.113.5:50051", CoordinatorTrust(insecure=True), server)
    assert server.fetched == []


def test_a_pinned_certificate_is_trusted_by_itself_under_its_own_name() -> None:
    server = FakeServer()
    decision = decide("203.0.113.5:50051", CoordinatorTrust(fingerprint=FINGERPRINT), server)
    assert decision.basis == "pinned" and decision.fingerprint == FINGERPRINT
    assert decision.root_pem == CERT_PEM  # the only root: the pinned certificate itself
    assert decision.server_name == "mlxnet-coordinator"  # the address is not among its names
    assert server.fetched == [("203.0.113.5", 50051, False)]  # a pin asks no CA
    assert decide("127.0.0.1:9", CoordinatorTrust(fingerprint=FINGERPRINT), server).server_name == ""


def test_a_changed_certificate_is_refused_naming_both_fingerprints() -> None:
    other = normalize_fingerprint("ab" * 32)
    with pytest.raises(CertificateChanged) as refused:
        decide("203.0.113.5:50051", CoordinatorTrust(fingerprint=other), FakeServer(ca_verified=True))
    assert refused.value.seen == FINGERPRINT and refused.value.pinned == other
    assert "intercepting" in str(refused.value)


def test_without_a_pin_a_ca_must_vouch_unless_first_use_is_allowed() -> None:
    with pytest.raises(UntrustedCertificate) as refused:
        decide("203.0.113.5:50051", CoordinatorTrust(), FakeServer())
    assert refused.value.seen == FINGERPRINT and f"--coordinator-fingerprint {FINGERPRINT}" in str(refused.value)
    by_ca = decide("203.0.113.5:50051", CoordinatorTrust(), FakeServer(ca_verified=True))
    assert by_ca.basis == "ca" and by_ca.server_name == ""
    first = decide("203.0.113.5:50051", CoordinatorTrust(trust_on_first_use=True), FakeServer())
    assert first.basis == "first use" and first.fingerprint == FINGERPRINT and first.root_pem == CERT_PEM
