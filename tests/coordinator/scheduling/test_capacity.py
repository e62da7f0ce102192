"""GET /v1/models' live capacity, read off the placement index, equals asking the planner Mac by
Mac (property test over random fleets), and costs the same with any number of Macs."""

from __future__ import annotations

from hypothesis import given

from contracts.ids import JobId
from coordinator.placement import FleetIndex, FleetSnapshot, JobRequest, Placement, place
from coordinator.scheduling.capacity import CAPACITY_CONTEXT_TOKENS, model_capacity
from tests.coordinator.placement.test_properties import CONFIG, MODELS, SETTINGS, fleets

CATALOG = {spec.model_id: spec for spec in MODELS}


def _by_trial(fleet: FleetSnapshot, model_id: str) -> tuple[int, int, float]:
    """(serving, available, fastest) as the planner sees each online Mac alone."""
    spec = CATALOG[model_id]
    request = JobRequest(JobId("capacity"), spec, min(spec.max_context_tokens, CAPACITY_CONTEXT_TOKENS))
    serving = [mac for mac in fleet.macs if mac.online and model_id in mac.served_models]
    placed = [decision for mac in serving
              if isinstance(decision := place(request, FleetSnapshot(macs=(mac,)), CONFIG), Placement)]
    return len(serving), len(placed), max((p.predicted_decode_tokens_per_s for p in placed), default=0.0)


@SETTINGS
@given(fleet=fleets())
def test_capacity_from_the_index_is_the_planner_asked_mac_by_mac(fleet: FleetSnapshot) -> None:
    index = FleetIndex.build(fleet, CONFIG)
    capacities = model_capacity(index, CATALOG, dict.fromkeys(CATALOG, 7))
    assert [c.spec.model_id for c in capacities] == sorted(CATALOG)
    for found in capacities:
        serving, available, fastest = _by_trial(fleet, found.spec.model_id)
        assert (found.macs_serving, found.macs_available) == (serving, available)
        assert found.predicted_decode_tokens_per_s == fastest
        assert found.first_registered_ms == 7
