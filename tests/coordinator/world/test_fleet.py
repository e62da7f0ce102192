"""The public fleet, pure: query parsing, status, reputation, rows and pods."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.hardware import ChipTier, LinkKind
from contracts.lending import LendingMode
from coordinator.errors import InvalidRequest
from coordinator.world.fleet import (
    PAGE_SIZE_MAX, FleetQuery, FleetSort, NodeFacts, NodeStats, NodeStatus, PodLinkFacts,
    fleet_row, lendable_bytes, node_status, page_payload, parse_fleet_query, pod_payload,
    pod_strategy,
)

OFFLINE_AFTER_MS = 10_000
NOW_MS = 1_800_000_000_000


def _facts(**changes: object) -> NodeFacts:
    values: dict[str, object] = dict(
        node_id="node-1", display_name="Studio in the attic", chip="Apple M3 Ultra", chip_tier="ultra",
        memory_bytes=512 << 30, gpu_working_set_bytes=384 << 30, gpu_cores=80,
        declared_bandwidth_gb_s=819.0, measured_bandwidth_gb_s=None, benchmark_flagged=False,
        simulated=True, mode="ultra_seat", accepting_jobs=True, lending_reason="",
        memory_cap_bytes=None, warm_models=("m",), served_models=("m",),
        registered_at_ms=NOW_MS - 1_000, last_heartbeat_ms=NOW_MS, left_at_ms=None)
    values.update(changes)
    return NodeFacts(**values)  # type: ignore[arg-type]


def test_defaults_and_every_parameter_parse() -> None:
    assert parse_fleet_query({}) == FleetQuery()
    query = parse_fleet_query({"page": "3", "page_size": "200", "q": "  attic ", "status": "busy",
                               "chip": "Apple M3 Ultra", "tier": "ultra", "mode": "ultra_seat",
                               "region": "Europe/Lisbon", "sort": "memory"})
    assert query == FleetQuery(page=3, page_size=200, q="attic", status=NodeStatus.BUSY, chip="Apple M3 Ultra",
                               tier=ChipTier.ULTRA, mode=LendingMode.ULTRA_SEAT, region="Europe/Lisbon",
                               sort=FleetSort.MEMORY)
    assert query.offset == 400


@pytest.mark.parametrize(("params", "param", "needle"), [
    ({"page": "0"}, "page", "from 1 to"),
    ({"page": "-1"}, "page", "whole number"),
    ({"page": "1.5"}, "page", "whole number"),
    ({"page_size": str(PAGE_SIZE_MAX + 1)}, "page_size", str(PAGE_SIZE_MAX)),
    ({"status": "sleeping"}, "status", "online, busy, offline"),
    ({"tier": "mega"}, "tier", "ultra"),
    ({"mode": "sometimes"}, "mode", "idle"),
    ({"sort": "price"}, "sort", "joined"),
    ({"q": "x" * 65}, "q", "longer than 64"),
    ({"region": "r" * 65}, "region", "longer than 64"),
])
def test_bad_parameters_are_refused_by_name(params: dict[str, str], param: str, needle: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_fleet_query(params)
    assert caught.value.param == param
    assert needle in str(caught.value)


def test_status_follows_the_schedulers_online_rule() -> None:
    assert node_status(NOW_MS, None, 0, NOW_MS, OFFLINE_AFTER_MS) is NodeStatus.ONLINE
    assert node_status(NOW_MS - OFFLINE_AFTER_MS, None, 2, NOW_MS, OFFLINE_AFTER_MS) is NodeStatus.BUSY
    assert node_status(NOW_MS - OFFLINE_AFTER_MS - 1, None, 0, NOW_MS, OFFLINE_AFTER_MS) is NodeStatus.OFFLINE
    assert node_status(NOW_MS, NOW_MS - 5, 1, NOW_MS, OFFLINE_AFTER_MS) is NodeStatus.OFFLINE


@given(st.integers(1, 2**45), st.one_of(st.none(), st.integers(1, 2**45)))
def test_lendable_memory_never_exceeds_the_gpu_budget_or_the_cap(budget: int, cap: int | None) -> None:
    lendable = lendable_bytes(budget, cap)
    assert lendable <= budget and (cap is None or lendable <= cap)
    assert lendable == (budget if cap is None else min(budget, cap))


def test_a_row_shows_the_public_fields_and_nothing_else() -> None:
    stats = NodeStats(active_jobs=1, jobs_served=7, jobs_failed=1, tokens_generated=900, reputation=0.987654,
                      checks_passed=6, checks_failed=0)
    row = fleet_row(_facts(memory_cap_bytes=100 << 30), stats, "Europe/Lisbon", "desk-pod", NOW_MS, OFFLINE_AFTER_MS)
    assert row["status"] == "busy" and row["region"] == "Europe/Lisbon" and row["pod_id"] == "desk-pod"
    assert row["lendable_bytes"] == 100 << 30 and row["jobs_served"] == 7 and row["tokens_generated"] == 900
    assert row["reputation"] == 0.9877
    assert row["checks"] == {"passed": 6, "failed": 0, "quarantined": False}
    assert not {"operator_id", "public_key", "session_token_sha256", "prompt", "hardware_json"} & set(row)


def test_a_mac_that_stopped_taking_work_says_why_only_then() -> None:
    paused = fleet_row(_facts(accepting_jobs=False, lending_reason="owner is back"), NodeStats(), None, None,
                       NOW_MS, OFFLINE_AFTER_MS)
    assert paused["not_accepting_reason"] == "owner is back"
    working = fleet_row(_facts(lending_reason="stale text"), NodeStats(), None, None, NOW_MS, OFFLINE_AFTER_MS)
    assert working["not_accepting_reason"] == ""


def test_page_payload_counts_pages() -> None:
    query = FleetQuery(page=2, page_size=50)
    payload = page_payload(query, 101, [], 4)
    assert (payload["pages"], payload["offset"], payload["total"], payload["version"]) == (3, 50, 101, 4)
    assert page_payload(FleetQuery(), 0, [], 0)["pages"] == 1


def _links(kind: LinkKind, pairs: list[tuple[str, str]]) -> tuple[PodLinkFacts, ...]:
    return tuple(PodLinkFacts(a, b, kind, 1) for a, b in pairs)


def test_tensor_needs_rdma_between_every_pair() -> None:
    members = ("a", "b", "c")
    full = [("a", "b"), ("b", "c"), ("a", "c")]
    assert pod_strategy(members, _links(LinkKind.RDMA_TB5, full)) == "tensor"
    assert pod_strategy(members, _links(LinkKind.RDMA_TB5, full[:2])) == "pipeline"  # a chain, not a mesh
    assert pod_strategy(members, _links(LinkKind.TCP_THUNDERBOLT, full)) == "pipeline"
    mixed = _links(LinkKind.RDMA_TB5, full[:2]) + _links(LinkKind.ETHERNET, full[2:])
    assert pod_strategy(members, mixed) == "pipeline"


def test_a_pod_is_online_only_when_every_member_is() -> None:
    rows = {"a": {"name": "A", "chip": "M3 Ultra", "status": "online", "lendable_bytes": 10},
            "b": {"name": "B", "chip": "M3 Ultra", "status": "busy", "lendable_bytes": 5}}
    links = _links(LinkKind.RDMA_TB5, [("a", "b")])
    pod = pod_payload("p", ("a", "b"), links, rows)
    assert pod["online"] is True and pod["lendable_bytes"] == 15 and pod["strategy"] == "tensor"
    assert pod["links"] == [{"a": "a", "b": "b", "kind": "rdma_tb5", "transport": "RDMA", "cables": 1}]
    missing = pod_payload("p", ("a", "b", "c"), links, rows)
    assert missing["online"] is False and missing["members"][2] == {"node_id": "c", "name": "c", "chip": "",
                                                                     "status": "offline"}
