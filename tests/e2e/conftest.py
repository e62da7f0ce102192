"""A real network on loopback: a coordinator and node agents as separate processes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contracts.tls import CoordinatorTrust
from tests.conftest import fresh_postgres_database
from mlxnet.processes import Child, start_coordinator, start_nodes

MODEL_ID = "test/tiny-llama"


@dataclass
class Network:
    work_dir: Path
    database_url: str
    model_dir: Path
    coordinator: Child
    nodes: list[Child]

    @property
    def address(self) -> str:
        return self.coordinator.extra["address"]

    @property
    def trust(self) -> CoordinatorTrust:
        """The coordinator's certificate pinned: every client here speaks TLS."""
        return self.coordinator.trust

    @property
    def pin_flags(self) -> list[str]:
        """The CLI's flags that pin the coordinator's certificate."""
        return ["--coordinator-fingerprint", self.trust.fingerprint]

    def restart_coordinator(self, *, crash: bool) -> None:
        """Stop (or SIGKILL) the coordinator and start it again on the same port and database."""
        port = int(self.address.rsplit(":", 1)[1])
        if crash:
            self.coordinator.kill()
        else:
            self.coordinator.stop()
        self.coordinator = start_coordinator(self.work_dir, database_url=self.database_url,
                                             port=port, heartbeat_interval_ms=500,
                                             allow_anonymous=True,
                                             verify_models=(f"{MODEL_ID}={self.model_dir}",))

    def stop(self) -> None:
        for child in [*self.nodes, self.coordinator]:
            child.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def network(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            tiny_model_dir: Path) -> Iterator[Network]:
    """One network per test module and database; tests must leave it running."""
    tmp_path = tmp_path_factory.mktemp(f"network-{request.param}")
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            database_url = f"sqlite:///{tmp_path / 'coordinator.db'}"
        else:
            database_url = stack.enter_context(fresh_postgres_database())
        yield from _run_network(tmp_path, tiny_model_dir, database_url)


def _run_network(tmp_path: Path, tiny_model_dir: Path, database_url: str) -> Iterator[Network]:
    # The coordinator's verifier worker replays sampled jobs: every job of these new nodes.
    coordinator = start_coordinator(tmp_path, database_url=database_url, heartbeat_interval_ms=500,
                                    allow_anonymous=True,
                                    verify_models=(f"{MODEL_ID}={tiny_model_dir}",))
    net = Network(tmp_path, database_url, tiny_model_dir, coordinator, [])
    try:
        model = [f"{MODEL_ID}={tiny_model_dir}"]
        net.nodes = start_nodes(tmp_path, net.address, [("mini", model, "m4-pro-64", "alice"),
                                                        ("studio", model, "m3-ultra-512", "bob")],
                                net.trust)
        yield net
    finally:
        net.stop()
