"""The agent's connection loop outlives a coordinator's refusal: it says why and registers again."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from contracts.hardware import ChipTier, HardwareReport
from node_agent.agent import AgentSettings, NodeAgent
from node_agent.coordinator_client import CallRejected
from node_agent.identity import load_or_create_identity

GIB = 1 << 30


class _NoEngine:
    """The refusal path never loads a model."""

    def warm_models(self) -> tuple[str, ...]:
        return ()


def test_a_refused_registration_is_logged_and_tried_again_instead_of_ending_the_agent(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hardware = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO, memory_bytes=24 * GIB,
                              gpu_working_set_bytes=18 * GIB, gpu_cores=20, memory_bandwidth_gb_s=273.0,
                              os_name="macOS", simulated=True)
    settings = AgentSettings(coordinator="127.0.0.1:1", identity=load_or_create_identity(tmp_path / "n.pem"),
                             hardware=hardware, models=(), operator_id="op", display_name="n")
    agent = NodeAgent(settings, _NoEngine())  # type: ignore[arg-type]
    attempts: list[int] = []

    def refuse() -> None:
        attempts.append(len(attempts))
        if len(attempts) == 3:
            agent.stopping.set()  # the third refusal is the last this test waits for
        raise CallRejected("PERMISSION_DENIED", "operator key does not match operator op")

    agent._register = refuse  # type: ignore[method-assign]
    finished = threading.Event()

    def run() -> None:
        agent.run()
        finished.set()

    with caplog.at_level(logging.ERROR, logger="node_agent.agent"):
        threading.Thread(target=run, daemon=True).start()
        assert finished.wait(30), "the agent's loop did not come back"
    assert len(attempts) == 3  # it registered again after each refusal, not once and out
    assert not agent.registered.is_set()
    refusals = [r.getMessage() for r in caplog.records if "refused this node" in r.getMessage()]
    assert len(refusals) == 3 and "operator key does not match" in refusals[0]
