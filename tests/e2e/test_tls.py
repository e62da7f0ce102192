"""TLS between real processes: a self-signed coordinator pinned on first join, a changed
certificate refused loudly, an operator's CA-signed certificate, and plaintext refused."""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from contracts.tls import CoordinatorTrust, split_address
from mlxnet.consumer import JobClient, JobRequestError
from mlxnet.node_main import EXIT_UNTRUSTED
from mlxnet.processes import Child, spawn_node, start_coordinator, wait_until_registered
from node_agent.lending.config import load_config

pytestmark = pytest.mark.e2e

MODEL_ID = "test/tiny-llama"
REFUSAL_TIMEOUT_S = 120.0  # the node notices the new certificate at its next reconnect


def _mlxnet(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mlxnet.cli", *argv], capture_output=True,
                          text=True, timeout=120, check=False, env={**os.environ, **(env or {})})


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Child]:
    child = start_coordinator(tmp_path, database_url=f"sqlite:///{tmp_path / 'c.db'}",
                              heartbeat_interval_ms=500, allow_anonymous=True)
    yield child
    child.stop()


def test_a_node_pins_the_coordinator_on_first_join_and_refuses_a_changed_one(
        tmp_path: Path, tiny_model_dir: Path, coordinator: Child) -> None:
    address, fingerprint = coordinator.extra["address"], coordinator.extra["fingerprint"]
    node = wait_until_registered(spawn_node(tmp_path, "tofu", address,
                                            [f"{MODEL_ID}={tiny_model_dir}"], profile="m4-pro-64"))
    try:
        config = load_config(tmp_path / "nodes" / "tofu" / "node.toml")
        assert config.fingerprint_for(address) == fingerprint
        # The coordinator comes back on the same port with a new self-signed certificate.
        coordinator.stop()
        shutil.rmtree(tmp_path / "coordinator" / "tls")
        impostor = start_coordinator(tmp_path, database_url=f"sqlite:///{tmp_path / 'c.db'}",
                                     port=split_address(address)[1], heartbeat_interval_ms=500)
        try:
            assert impostor.extra["fingerprint"] != fingerprint
            assert node.process.wait(REFUSAL_TIMEOUT_S) == EXIT_UNTRUSTED
        finally:
            impostor.stop()
        log = node.log_path.read_text()
        assert "refusing the coordinator" in log and f"not the pinned {fingerprint}" in log
    finally:
        node.stop()


def test_the_cli_needs_the_pin_and_refuses_plaintext(coordinator: Child) -> None:
    address, fingerprint = coordinator.extra["address"], coordinator.extra["fingerprint"]
    unpinned = _mlxnet("jobs", "get", "job-none", "--coordinator", address)
    assert unpinned.returncode == 1 and f"--coordinator-fingerprint {fingerprint}" in unpinned.stderr
    pinned = _mlxnet("jobs", "get", "job-none", "--coordinator", address,
                     "--coordinator-fingerprint", fingerprint.lower())
    assert pinned.returncode == 1 and "NOT_FOUND" in pinned.stderr  # through TLS to the service
    wrong = _mlxnet("jobs", "get", "job-none", "--coordinator", address,
                    "--coordinator-fingerprint", "ab" * 32)
    assert wrong.returncode == 1 and "intercepting" in wrong.stderr
    plaintext = _mlxnet("jobs", "get", "job-none", "--coordinator", address, "--insecure")
    assert plaintext.returncode == 1 and "UNAVAILABLE" in plaintext.stderr  # the server speaks only TLS


def test_a_coordinator_refuses_to_serve_plaintext_off_loopback(tmp_path: Path) -> None:
    refused = _mlxnet("coordinator", "--insecure", "--host", "0.0.0.0", "--port", "0",
                      "--http-port", "0", "--data-dir", str(tmp_path))
    assert refused.returncode == 2 and "only allowed on a loopback --host" in refused.stderr


def _authority_and_certificate(directory: Path) -> tuple[Path, Path, Path]:
    """A private CA and a certificate it signs for 127.0.0.1: (ca.pem, cert.pem, key.pem)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def test_an_operators_ca_signed_certificate_is_trusted_through_the_ca(tmp_path: Path) -> None:
    ca, cert, key = _authority_and_certificate(tmp_path)
    child = start_coordinator(tmp_path, database_url=f"sqlite:///{tmp_path / 'c.db'}",
                              allow_anonymous=True, certificate=(cert, key))
    try:
        address = child.extra["address"]
        with JobClient(address, trust=CoordinatorTrust(ca_file=ca)) as client:
            with pytest.raises(JobRequestError) as answered:
                client.get("job-none")
        assert answered.value.code == "NOT_FOUND"
        # The CLI trusts the system's CA store, which SSL_CERT_FILE stands in for here.
        through_store = _mlxnet("jobs", "get", "job-none", "--coordinator", address,
                                env={"SSL_CERT_FILE": str(ca)})
        assert through_store.returncode == 1 and "NOT_FOUND" in through_store.stderr
    finally:
        child.stop()
