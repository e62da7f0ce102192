"""MLX World's public reads on SQLite and PostgreSQL: paging, filters, totals, pods, jobs."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import update

from contracts.hardware import LinkKind
from contracts.ids import NodeId
from contracts.lending import LendingMode
from contracts.pods import PodCable, PodDeclaration
from coordinator.errors import InvalidRequest, NotFound
from coordinator.model import JobStatus
from coordinator.placement.config import MemoryConfig
from coordinator.placement.memory import owner_reserve_bytes
from coordinator.storage import node_rows
from coordinator.storage.tables import job_assignments, jobs
from coordinator.verification import store as check_store
from coordinator.verification.policy import TrustRecord, reputation
from coordinator.verification.store import CheckRecord, CheckStatus, CreditState, NodeTrust
from coordinator.world import operator_keys
from node_agent.hardware.profiles import simulated_profile
from tests.coordinator.world.conftest import OFFLINE_AFTER_MS, SECRET_OUTPUT, SECRET_PROMPT, WorldEnv, add_job, add_node

GIB = 1024**3
NAMES = ("Attic Studio", "Desk mini", "100% Mac", "under_score", "Kitchen laptop", "Basement Ultra", "Office mini")


def _fleet(env: WorldEnv) -> dict[str, str]:
    """Seven Macs of three operators: one offline, one busy, two in a pod; name -> node id."""
    now = env.clock.now
    ids: dict[str, str] = {}
    with env.session() as session:
        for index, name in enumerate(NAMES):
            profile = "m3-ultra-512" if "Ultra" in name or "Studio" in name else "m4-pro-64"
            ids[name] = add_node(session, name, f"op{index % 3}", now, profile=profile,
                                 mode=LendingMode.ULTRA_SEAT if profile.startswith("m3") else LendingMode.IDLE,
                                 heartbeat_age_ms=OFFLINE_AFTER_MS + 1 if name == "Kitchen laptop" else 0,
                                 joined_ago_ms=1_000 * index)
        operator_keys.set_region(session, "op0", ids["Attic Studio"], "Europe/Lisbon", now)
        operator_keys.set_region(session, "op0", ids["under_score"], "Europe/Lisbon", now)
        add_job(session, (ids["Desk mini"],), now, status=JobStatus.ASSIGNED)  # keeps Desk mini busy
        node_rows.save_pod(session, PodDeclaration("desk-pod", NodeId(ids["Attic Studio"]),
                                                      (NodeId(ids["Attic Studio"]), NodeId(ids["Basement Ultra"])),
                                                      (PodCable(NodeId(ids["Attic Studio"]),
                                                                NodeId(ids["Basement Ultra"]), LinkKind.RDMA_TB5),)),
                              now)
    return ids


def _names(page: dict) -> list[str]:
    return [node["name"] for node in page["nodes"]]


def test_pages_partition_the_fleet_newest_first(world_env: WorldEnv) -> None:
    _fleet(world_env)
    seen: list[str] = []
    for page in (1, 2, 3):
        data = world_env.world.fleet_page({"page": str(page), "page_size": "3"})
        assert data["total"] == 7 and data["pages"] == 3
        seen += _names(data)
    assert seen == list(NAMES)  # joined 0, 1, 2 ... seconds ago: newest first
    assert world_env.world.fleet_page({"page": "4", "page_size": "3"})["nodes"] == []


def test_status_filters_match_the_status_shown(world_env: WorldEnv) -> None:
    _fleet(world_env)
    by_status = {status: world_env.world.fleet_page({"status": status})["nodes"]
                 for status in ("online", "busy", "offline")}
    assert [n["name"] for n in by_status["busy"]] == ["Desk mini"]
    assert [n["name"] for n in by_status["offline"]] == ["Kitchen laptop"]
    assert len(by_status["online"]) == 5
    for status, nodes in by_status.items():
        assert all(node["status"] == status for node in nodes)


def test_search_takes_percent_and_underscore_literally(world_env: WorldEnv) -> None:
    ids = _fleet(world_env)
    assert _names(world_env.world.fleet_page({"q": "100%"})) == ["100% Mac"]
    assert _names(world_env.world.fleet_page({"q": "_"})) == ["under_score"]
    assert _names(world_env.world.fleet_page({"q": "MINI", "sort": "name"})) == ["Desk mini", "Office mini"]
    assert _names(world_env.world.fleet_page({"q": ids["Attic Studio"]})) == ["Attic Studio"]


def test_chip_tier_mode_region_filters_and_sorts(world_env: WorldEnv) -> None:
    _fleet(world_env)
    ultras = world_env.world.fleet_page({"tier": "ultra", "sort": "name"})
    assert _names(ultras) == ["Attic Studio", "Basement Ultra"]
    assert _names(world_env.world.fleet_page({"chip": "Apple M3 Ultra", "mode": "ultra_seat", "sort": "name"})) \
        == ["Attic Studio", "Basement Ultra"]
    assert _names(world_env.world.fleet_page({"region": "Europe/Lisbon", "sort": "name"})) \
        == ["Attic Studio", "under_score"]
    by_memory = world_env.world.fleet_page({"sort": "memory"})["nodes"]
    assert [n["memory_bytes"] for n in by_memory] == sorted((n["memory_bytes"] for n in by_memory), reverse=True)
    pod_member = next(n for n in ultras["nodes"] if n["name"] == "Attic Studio")
    assert pod_member["pod_id"] == "desk-pod" and pod_member["region"] == "Europe/Lisbon"
    with pytest.raises(InvalidRequest):
        world_env.world.fleet_page({"status": "asleep"})


def test_facets_count_what_filters_offer(world_env: WorldEnv) -> None:
    _fleet(world_env)
    facets = world_env.world.facets()
    assert {"value": "Apple M3 Ultra", "count": 2} in facets["chips"]
    assert facets["regions"] == [{"value": "Europe/Lisbon", "count": 2}]
    assert sum(item["count"] for item in facets["modes"]) == 7


def test_pods_show_members_cables_and_strategy(world_env: WorldEnv) -> None:
    _fleet(world_env)
    (pod,) = world_env.world.pods()["pods"]
    assert pod["pod_id"] == "desk-pod" and pod["strategy"] == "tensor" and pod["online"] is True
    assert [m["name"] for m in pod["members"]] == ["Attic Studio", "Basement Ultra"]
    assert pod["links"][0]["transport"] == "RDMA"


def test_totals_count_macs_memory_and_the_largest_candidate(world_env: WorldEnv) -> None:
    ids = _fleet(world_env)
    with world_env.session() as session:
        add_job(session, (ids["Office mini"],), world_env.clock.now, operator="op0", tokens=30)
    totals = world_env.world.totals()["totals"]
    assert (totals["macs_total"], totals["macs_online"], totals["macs_busy"], totals["pods_online"]) == (7, 6, 1, 1)
    assert totals["largest_model"]["where"] == "pod desk-pod"
    assert totals["jobs_per_minute"] == 1 and totals["tokens_per_s"] == 0.5
    assert int(totals["mlx_paid_base_units"]) > 0
    world_env.clock.now += 61_000  # the job leaves the one-minute window; heartbeats are stale too
    later = world_env.world.totals()["totals"]
    assert later["jobs_per_minute"] == 0 and later["macs_online"] == 0
    assert later["mlx_paid_base_units"] == totals["mlx_paid_base_units"]


def test_weights_shared_by_a_batch_are_counted_once_in_the_free_memory(world_env: WorldEnv) -> None:
    # Three jobs of one model in one Mac's batch: each reserves weights + runtime (shared) and its
    # own KV cache; the shared part is held once, as placement counts it.
    with world_env.session() as session:
        mac = add_node(session, "Batching Studio", "op0", world_env.clock.now, profile="m3-ultra-512")
        job_ids = [add_job(session, (mac,), world_env.clock.now, status=JobStatus.ASSIGNED) for _ in range(3)]
        session.execute(update(job_assignments).where(job_assignments.c.job_id.in_(job_ids))
                        .values(reserved_memory_bytes=50 * GIB, shared_memory_bytes=40 * GIB))
    totals = world_env.world.totals()["totals"]
    lendable = totals["memory_lendable_bytes"]
    assert totals["largest_model"]["free_bytes"] == lendable - (40 + 3 * 10) * GIB  # not lendable - 150 GiB
    with world_env.session() as session:  # another model's job shares nothing with these
        other = add_job(session, (mac,), world_env.clock.now, status=JobStatus.ASSIGNED)
        session.execute(update(jobs).where(jobs.c.job_id == other).values(model_id="other/model"))
        session.execute(update(job_assignments).where(job_assignments.c.job_id == other)
                        .values(reserved_memory_bytes=20 * GIB, shared_memory_bytes=15 * GIB))
    assert world_env.world.totals()["totals"]["largest_model"]["free_bytes"] == lendable - (70 + 20) * GIB


def test_an_idle_mac_lends_what_placement_would_leaving_the_owner_reserve(world_env: WorldEnv) -> None:
    with world_env.session() as session:
        add_node(session, "Idle mini", "op0", world_env.clock.now, profile="m4-16", mode=LendingMode.IDLE)
        add_node(session, "Seat mini", "op1", world_env.clock.now, profile="m4-16", mode=LendingMode.DEDICATED)
    hardware = simulated_profile("m4-16")
    idle_ceiling = min(hardware.gpu_working_set_bytes,
                       hardware.memory_bytes - owner_reserve_bytes(hardware.memory_bytes, MemoryConfig()))
    assert 0 < idle_ceiling < hardware.gpu_working_set_bytes  # the reserve bites on a 16 GB Mac
    totals = world_env.world.totals()["totals"]
    assert totals["memory_lendable_bytes"] == idle_ceiling + hardware.gpu_working_set_bytes
    assert totals["largest_model"]["free_bytes"] == hardware.gpu_working_set_bytes  # the seat is the freer


def test_the_fleet_fingerprint_moves_when_a_mac_joins_or_goes_offline(world_env: WorldEnv) -> None:
    _fleet(world_env)
    first = world_env.world.snapshot()
    assert world_env.world.snapshot().fingerprint == first.fingerprint
    with world_env.session() as session:
        add_node(session, "Newcomer", "op9", world_env.clock.now)
    joined = world_env.world.snapshot()
    assert joined.fingerprint != first.fingerprint and joined.totals.macs_total == 8
    world_env.clock.now += OFFLINE_AFTER_MS + 1
    assert world_env.world.snapshot().fingerprint != joined.fingerprint


def test_a_job_page_shows_placement_timing_receipt_and_pay_but_no_secrets(world_env: WorldEnv) -> None:
    ids = _fleet(world_env)
    with world_env.session() as session:
        job_id = add_job(session, (ids["Office mini"],), world_env.clock.now, operator="op0")
        failed_id = add_job(session, (ids["Attic Studio"],), world_env.clock.now, status=JobStatus.FAILED,
                            error=f"node x: {SECRET_PROMPT} was too long")
    job = world_env.world.job(job_id)
    assert job["status"] == "completed"
    assert job["placement"]["nodes"] == [{"node_id": ids["Office mini"], "name": "Office mini",
                                          "chip": "Apple M4 Pro", "layers": 4}]
    assert job["placement"]["explanation"]["chosen_name"] == "Office mini"
    assert job["placement"]["explanation"]["top_candidates"][0]["name"] == "Office mini"
    assert job["receipt"]["completion_tokens"] == 8 and job["receipt"]["signature"] == "01" * 64
    assert job["check"]["receipt_verified"] is True and job["check"]["pay_state"] == "paid"
    assert job["timing"]["queued_ms"] == 500 and job["timing"]["time_to_first_token_ms"] == 100
    failed = world_env.world.job(failed_id)
    assert failed["error"] == "the node reported a failure"  # the node's own words stay private
    for shown in (job, failed):
        text = json.dumps(shown)
        assert SECRET_PROMPT not in text and SECRET_OUTPUT not in text
        assert "prompt_digest" not in text and "output_digest" not in text and "anonymous" not in text
    with pytest.raises(NotFound):
        world_env.world.job("job-unknown")
    with pytest.raises(InvalidRequest):
        world_env.world.job("x" * 65)


def test_reputation_and_checks_come_from_the_proof_checks(world_env: WorldEnv) -> None:
    ids = _fleet(world_env)
    policy = world_env.service.config.trust
    now = world_env.clock.now
    with world_env.session() as session:
        check_store.save_node_trust(session, NodeTrust(ids["Office mini"], TrustRecord(12, 0, None)), now)
        check_store.save_node_trust(session, NodeTrust(ids["Desk mini"], TrustRecord(3, 2, 0), now - 5, "cheated"),
                                    now)
        job_id = add_job(session, (ids["Office mini"],), now, operator="op0")
        check_store.insert_check(session, CheckRecord(
            job_id=job_id, node_id=ids["Office mini"], operator_id="op0", status=CheckStatus.FAILED, check_rate=1.0,
            sampled=True, operator_credit=5, credit_state=CreditState.VOIDED, hold_until_ms=now + 3_600_000,
            completed_at_ms=now, reason=f"token 2: the replay would not pick it ({SECRET_OUTPUT})",
            checked_at_ms=now + 10))
    rows = {n["name"]: n for n in world_env.world.fleet_page({"page_size": "200"})["nodes"]}
    assert rows["Office mini"]["reputation"] == round(reputation(TrustRecord(12, 0, None), policy), 4)
    assert rows["Office mini"]["checks"] == {"passed": 12, "failed": 0, "quarantined": False}
    assert rows["Desk mini"]["reputation"] == 0.0 and rows["Desk mini"]["checks"]["quarantined"] is True
    assert rows["Attic Studio"]["reputation"] == round(reputation(TrustRecord(), policy), 4)  # a new Mac: the prior
    check = world_env.world.job(job_id)["check"]
    assert check["proof_check"] == {"status": "failed", "sampled": True, "hold_until_ms": now + 3_600_000,
                                    "checked_at_ms": now + 10}
    assert SECRET_OUTPUT not in json.dumps(world_env.world.job(job_id))  # the check's reason stays private
