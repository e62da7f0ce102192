"""Issue 25's hostile nodes against a real coordinator process (with its verifier worker):
an out-of-vocabulary token id is refused and crashes nothing, at first or on restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxnet.consumer import JobClient
from mlxnet.processes import start_coordinator
from node_agent.coordinator_client import CallRejected, CoordinatorClient
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import load_or_create_identity
from node_agent.model_files import describe_model

pytestmark = pytest.mark.e2e
MODEL_ID = "test/tiny-llama"


def _coordinator(work_dir: Path, database_url: str, model_dir: Path, port: int = 0):  # type: ignore[no-untyped-def]
    return start_coordinator(work_dir, database_url=database_url, port=port, heartbeat_interval_ms=500,
                             allow_anonymous=True, verify_models=(f"{MODEL_ID}={model_dir}",))


def test_an_out_of_vocabulary_token_id_is_refused_and_crashes_nothing(tmp_path: Path,
                                                                     tiny_model_dir: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    coordinator = _coordinator(tmp_path, database_url, tiny_model_dir)
    try:
        address = coordinator.extra["address"]
        spec = describe_model(MODEL_ID, tiny_model_dir)
        assert spec.vocab_size > 0
        mallory = CoordinatorClient(address)
        identity = load_or_create_identity(tmp_path / "mallory.pem")
        mallory.register(identity, simulated_profile("m4-max-128"), (spec,), "mallory", "mallory", 1)
        with JobClient(address) as consumer:
            job = consumer.submit(MODEL_ID, "In the beginning", max_tokens=8)
            assignment = next(mallory.assignments())
            assert assignment.job_id == job.job_id
            with pytest.raises(CallRejected) as refused:
                mallory.stream_tokens(job.job_id, iter([(0, (5, 2**31 - 1), "x")]))
            assert refused.value.code == "INVALID_ARGUMENT"
            assert f"token id {2**31 - 1} is outside the vocabulary of {MODEL_ID}" in str(refused.value)
            assert consumer.get(job.job_id).completion_tokens == 0  # stored nothing
        mallory.close()
        port = int(address.rsplit(":", 1)[1])
        assert coordinator.process.poll() is None  # still serving
        coordinator.stop()
        coordinator = _coordinator(tmp_path, database_url, tiny_model_dir, port)  # and after a restart
        with JobClient(coordinator.extra["address"]) as consumer:
            assert consumer.get(job.job_id).job_id == job.job_id
        assert coordinator.process.poll() is None
    finally:
        coordinator.stop()
