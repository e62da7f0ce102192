"""A real network for the gateway's end-to-end tests: a coordinator that requires API keys,
and node agents running real MLX inference, as separate processes."""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest

from contracts.tls import CoordinatorTrust
from coordinator.money.api_keys import KeyLimits
from coordinator.storage.database import Database
from ledger.units import BASE_UNITS_PER_MLX
from mlxnet import keys_cli
from mlxnet.processes import STOP_TIMEOUT_S, Child, start_coordinator, start_nodes
from tests.conftest import fresh_postgres_database

MODEL_ID = "test/tiny-llama"
# The chat the end-to-end tests send, through the model's own template.
MESSAGES = [{"role": "system", "content": "Answer in the words of Genesis."},
            {"role": "user", "content": "Who was the father of Enoch?"}]


@dataclass
class GatewayNetwork:
    work_dir: Path
    database_url: str
    model_dir: Path
    coordinator: Child
    nodes: list[Child]
    db: Database
    clients: list[openai.OpenAI | httpx.Client] = field(default_factory=list)  # closed with the network

    @property
    def base_url(self) -> str:
        return f"{self.coordinator.extra['url']}/v1"  # https: the gateway speaks TLS

    @property
    def grpc_address(self) -> str:
        return self.coordinator.extra["address"]

    @property
    def trust(self) -> CoordinatorTrust:
        """The coordinator's self-signed certificate, pinned by its fingerprint."""
        return self.coordinator.trust

    @property
    def certificate(self) -> str:
        """The path of the coordinator's certificate (PEM), the CA for HTTPS clients."""
        return self.coordinator.extra["certificate"]

    def ssl_context(self) -> ssl.SSLContext:
        return self.coordinator.ssl_context()

    def new_key(self, consumer: str, deposit_mlx: int = 10, limits: KeyLimits = KeyLimits()) -> str:
        _, key = keys_cli.create(self.db, consumer, limits,
                                 deposit_amount=deposit_mlx * BASE_UNITS_PER_MLX)
        return key

    def http_client(self) -> httpx.Client:
        """An HTTPS client trusting the coordinator's certificate, closed with the network."""
        client = httpx.Client(verify=self.ssl_context())
        self.clients.append(client)
        return client

    def client(self, key: str) -> openai.OpenAI:
        """The official client, unchanged, pointed at the gateway (no retries, so errors show)."""
        client = openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=120,
                               http_client=openai.DefaultHttpxClient(verify=self.ssl_context()))
        self.clients.append(client)
        return client

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        for node in self.nodes:  # ask them all at once: each may take a while to wind down
            if node.process.poll() is None:
                node.process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for node in self.nodes:
            try:
                node.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
        for child in [*self.nodes, self.coordinator]:
            child.stop()
        self.db.dispose()


@contextlib.contextmanager
def gateway_network(tmp_path: Path, model_dir: Path, database: str,
                    nodes: tuple[tuple[str, str, str], ...]) -> Iterator[GatewayNetwork]:
    """nodes: (name, simulated profile, operator); no anonymous access."""
    with contextlib.ExitStack() as stack:
        url = (f"sqlite:///{tmp_path / 'coordinator.db'}" if database == "sqlite"
               else stack.enter_context(fresh_postgres_database()))
        coordinator = start_coordinator(tmp_path, database_url=url, heartbeat_interval_ms=500)
        net = GatewayNetwork(tmp_path, url, model_dir, coordinator, [], Database(url))
        try:
            net.nodes = start_nodes(tmp_path, net.grpc_address, [
                (name, [f"{MODEL_ID}={model_dir}"], profile, operator)
                for name, profile, operator in nodes], net.trust)
            yield net
        finally:
            net.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def network(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            tiny_model_dir: Path) -> Iterator[GatewayNetwork]:
    """One network per module and database; tests leave it running."""
    tmp_path = tmp_path_factory.mktemp(f"gateway-{request.param}")
    with gateway_network(tmp_path, tiny_model_dir, request.param,
                         (("mini", "m4-pro-64", "alice"), ("studio", "m3-ultra-512", "bob"))) as net:
        yield net
