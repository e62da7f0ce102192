"""Issue 32: a model id means one set of weights. A real node process serving a 4-bit copy of
the tiny model under its id, with the copy's own true digest, is refused at registration by a
real coordinator with no verifier (the default), and the honest node keeps serving.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxnet.consumer import JobClient
from mlxnet.processes import spawn_node, start_coordinator, start_nodes
from node_agent.model_files import describe_model
from protos.mlxnet.v1 import job_pb2
from tests.adversarial.models import quantized_copy

pytestmark = pytest.mark.e2e
MODEL_ID = "mlxnet/tiny"
REFUSAL_WAIT_S = 120


def test_a_4_bit_copy_under_its_own_true_digest_is_refused_at_registration(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    q4_dir = quantized_copy(tiny_model_dir, tmp_path / "q4", 4)
    honest, copy = describe_model(MODEL_ID, tiny_model_dir), describe_model(MODEL_ID, q4_dir)
    assert copy.weights_digest != honest.weights_digest  # its own true digest, not a forged one
    coordinator = start_coordinator(tmp_path, database_url=f"sqlite:///{tmp_path / 'c.db'}",
                                    heartbeat_interval_ms=500, allow_anonymous=True)
    nodes = []
    try:
        address = coordinator.extra["address"]
        nodes = start_nodes(tmp_path, address, [("alice", [f"{MODEL_ID}={tiny_model_dir}"], "m4-pro-64",
                                                 "alice")], coordinator.trust)
        mallory = spawn_node(tmp_path, "mallory", address, [f"{MODEL_ID}={q4_dir}"],
                             profile="m4-max-128", operator="mallory", trust=coordinator.trust)
        nodes.append(mallory)
        assert mallory.process.wait(timeout=REFUSAL_WAIT_S) == 2  # refused: it stops, saying why
        log = mallory.log_path.read_text()
        assert "the coordinator refused this node: FAILED_PRECONDITION" in log
        assert f"model '{MODEL_ID}' is bound to weights {honest.weights_digest[:16]}" in log
        assert f"weights_digest '{copy.weights_digest}'" in log
        assert "Serve the bound weights, or serve yours under another model id" in log
        with JobClient(address, trust=coordinator.trust) as consumer:  # the honest node serves
            job = consumer.submit(MODEL_ID, "In the beginning", max_tokens=4)
            final = [item for item in consumer.stream(job.job_id) if isinstance(item, job_pb2.Job)][-1]
            assert final.status == job_pb2.JOB_STATUS_COMPLETED
            assert list(final.node_ids) == [nodes[0].extra["node_id"]]
    finally:
        for node in nodes:
            node.stop()
        coordinator.stop()
