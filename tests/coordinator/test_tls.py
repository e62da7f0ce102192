"""The coordinator's TLS identity, and its ports refusing plaintext clients."""

from __future__ import annotations

import datetime
import ssl
import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from contracts.tls import CoordinatorTrust, PlaintextRefused, UntrustedCertificate
from coordinator.config import CoordinatorConfig
from coordinator.server import RunningCoordinator, start
from coordinator.tls import TlsSetupError, load, load_or_create, self_signed_certificate
from mlxnet.consumer import JobClient, JobRequestError
from protos.mlxnet.v1 import job_pb2, job_pb2_grpc


def test_the_self_signed_identity_is_made_once_with_a_private_key(tmp_path: Path) -> None:
    first = load_or_create(tmp_path, "127.0.0.1")
    assert first.self_signed and first.key_path.parent == tmp_path / "tls"
    assert stat.S_IMODE(first.key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(first.key_path.parent.stat().st_mode) == 0o700
    again = load_or_create(tmp_path, "127.0.0.1")
    assert again.fingerprint == first.fingerprint  # pinned nodes keep trusting a restarted coordinator


def test_a_key_that_is_not_the_certificates_is_refused(tmp_path: Path) -> None:
    cert_pem, _ = self_signed_certificate(("a.example",))
    _, other_key = self_signed_certificate(("b.example",))
    (tmp_path / "cert.pem").write_bytes(cert_pem)
    (tmp_path / "key.pem").write_bytes(other_key)
    with pytest.raises(TlsSetupError, match="is not the key of the certificate"):
        load(tmp_path / "cert.pem", tmp_path / "key.pem")
    (tmp_path / "key.pem").write_bytes(b"not a key")
    with pytest.raises(TlsSetupError, match="cannot use"):
        load(tmp_path / "cert.pem", tmp_path / "key.pem")


def test_an_expired_certificate_is_still_pinned_by_fingerprint_not_dates(tmp_path: Path) -> None:
    old = datetime.datetime(2001, 1, 1, tzinfo=datetime.timezone.utc)
    identity = load_or_create(tmp_path, "127.0.0.1", now=old)
    assert identity.fingerprint.startswith("SHA256:")


def test_plaintext_is_served_only_on_loopback(tmp_path: Path) -> None:
    with pytest.raises(PlaintextRefused, match="only listens on loopback"):
        start(CoordinatorConfig(database_url=f"sqlite:///{tmp_path / 'c.db'}"), host="0.0.0.0")


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[RunningCoordinator]:
    running = start(CoordinatorConfig(database_url=f"sqlite:///{tmp_path / 'c.db'}",
                                      allow_anonymous=True),
                    http_port=0, tls=load_or_create(tmp_path, "127.0.0.1"))
    yield running
    running.stop()


def _get_job(channel: grpc.Channel) -> grpc.StatusCode:
    try:
        job_pb2_grpc.JobServiceStub(channel).GetJob(job_pb2.GetJobRequest(job_id="job-none"), timeout=10)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def test_a_plaintext_client_is_refused_on_both_ports(secured: RunningCoordinator, tmp_path: Path) -> None:
    address = f"127.0.0.1:{secured.port}"
    with grpc.insecure_channel(address) as channel:
        assert _get_job(channel) is grpc.StatusCode.UNAVAILABLE
    assert secured.gateway is not None
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(f"http://127.0.0.1:{secured.gateway.port}/v1/models", timeout=10)
    # The same requests over TLS get answers: the job is unknown, the models are listed.
    pinned = CoordinatorTrust(fingerprint=load_or_create(tmp_path, "127.0.0.1").fingerprint)
    with JobClient(address, trust=pinned) as client:
        with pytest.raises(JobRequestError) as refused:
            client.get("job-none")
    assert refused.value.code == "NOT_FOUND"
    context = ssl.create_default_context(cafile=str(tmp_path / "tls" / "cert.pem"))
    assert httpx.get(f"https://127.0.0.1:{secured.gateway.port}/v1/models", verify=context,
                     timeout=10).status_code == 200


def test_a_client_without_a_pin_or_a_ca_refuses_a_self_signed_coordinator(
        secured: RunningCoordinator) -> None:
    with pytest.raises(UntrustedCertificate, match="--coordinator-fingerprint SHA256:"):
        JobClient(f"127.0.0.1:{secured.port}")
    assert secured.gateway is not None
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"https://127.0.0.1:{secured.gateway.port}/v1/models", timeout=10)
