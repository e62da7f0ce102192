"""The service records into its own registry: heartbeats, placements and refusals, ended jobs,
and the network's figures read at scrape time."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from coordinator.errors import Unplaceable
from coordinator.service import CoordinatorService
from coordinator.storage import node_rows
from node_agent.identity import load_or_create_identity
from tests.coordinator.service.test_service import HUGE, SMALL, _register, _submission, service  # noqa: F401


def samples(service: CoordinatorService) -> dict:
    text = service.core.metrics.exposition().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_heartbeats_placements_and_a_cancelled_job(tmp_path: Path, service: CoordinatorService) -> None:
    node_id = _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL, HUGE))
    with service.db.read_transaction() as session:
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    service.nodes.heartbeat(node, 0)
    service.nodes.heartbeat(node, 0)
    job = service.jobs.submit(_submission()).job
    queued = service.jobs.submit(_submission(prompt="Again")).job  # the Mac is busy: it waits
    try:
        service.jobs.submit(_submission("huge"))
    except Unplaceable:
        pass
    else:
        raise AssertionError("a 2 TB model fits no 64 GB Mac")
    found = samples(service)
    assert value(found, "mlxnet:heartbeats_total") == 2
    assert value(found, "mlxnet:placements_total", outcome="placed") == 1
    assert value(found, "mlxnet:placements_total", outcome="waiting") == 1
    assert value(found, "mlxnet:placements_total", outcome="refused") == 1
    assert value(found, "mlxnet:placement_refusals_total", reason="busy", permanent="false") == 1
    # Refused for good while its Mac was busy: the label says no Mac could take it even idle.
    assert value(found, "mlxnet:placement_refusals_total", reason="never_fits", permanent="true") == 1
    assert value(found, "mlxnet:placement_refusals_total", reason="busy", permanent="true") == 0
    assert value(found, "mlxnet:num_requests_running", model_name="small") == 1
    assert value(found, "mlxnet:num_requests_waiting", model_name="small") == 1
    assert value(found, "mlxnet:macs", state="working") == 1

    service.jobs.cancel(job.job_id)  # the queued job takes the Mac in the scheduler's pass
    found = samples(service)
    assert value(found, "mlxnet:request_success_total", model_name="small", finished_reason="abort") == 1
    assert value(found, "mlxnet:time_to_first_token_seconds_count", model_name="small") == 0  # no token
    assert value(found, "mlxnet:e2e_request_latency_seconds_count", model_name="small") == 1
    assert value(found, "mlxnet:placements_total", outcome="placed") == 2
    assert value(found, "mlxnet:num_requests_running", model_name="small") == 1
    assert value(found, "mlxnet:num_requests_waiting", model_name="small") == 0
    assert service.jobs.get(queued.job_id).job.node_ids == (node_id,)

    service.clock.ms += service.config.node_offline_after_ms + 1  # type: ignore[attr-defined]
    assert value(samples(service), "mlxnet:macs", state="offline") == 1
