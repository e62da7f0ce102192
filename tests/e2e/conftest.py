"""A real network on loopback: a coordinator and node agents as separate processes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

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

    def restart_coordinator(self, *, crash: bool) -> None:
        """Stop (or SIGKILL) the coordinator and start it again on the same port and database."""
        port = int(self.address.rsplit(":", 1)[1])
        if crash:
            self.coordinator.kill()
        else:
            self.coordinator.stop()
        self.coordinator = start_coordinator(self.work_dir, database_url=self.database_url,
                                             port=port, heartbeat_interval_ms=500)

    def stop(self) -> None:
        for child in [*self.nodes, self.coordinator]:
            child.stop()


@pytest.fixture
def network(tmp_path: Path, tiny_model_dir: Path, database_url: str) -> Iterator[Network]:
    coordinator = start_coordinator(tmp_path, database_url=database_url, heartbeat_interval_ms=500)
    net = Network(tmp_path, database_url, tiny_model_dir, coordinator, [])
    try:
        model = [f"{MODEL_ID}={tiny_model_dir}"]
        net.nodes = start_nodes(tmp_path, net.address, [("mini", model, "m4-pro-64", "alice"),
                                                        ("studio", model, "m3-ultra-512", "bob")])
        yield net
    finally:
        net.stop()
