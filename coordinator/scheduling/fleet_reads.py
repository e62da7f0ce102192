"""The fleet as placement sees it, read from the database: whole, or Mac by Mac.

Quarantined nodes (failed checks) are left out; trust becomes each Mac's reputation.
A Mac whose hardware is only claimed (no benchmark that fits its chip) is placed as the
slowest Apple chip in the table, or slower if it measured less: a fake Ultra gets no fast jobs.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.chips import all_chips
from contracts.hardware import HardwareReport
from contracts.ids import NodeId
from contracts.lending import LendingMode as NodeLendingMode
from contracts.pods import PodDeclaration
from coordinator.config import CoordinatorConfig
from coordinator.model import NodeRecord
from coordinator.placement.candidates import FleetSnapshot, LendingMode, MacCandidate, PodCandidate, PodLink
from coordinator.storage import job_rows, node_rows
from coordinator.verification import store as check_store
from coordinator.verification.policy import TrustRecord, reputation


@functools.cache
def slowest_apple_bandwidth_gb_s() -> float:
    return min(chip.bandwidth_gb_s for chip in all_chips())


def placement_figures(node: NodeRecord, config: CoordinatorConfig) -> tuple[HardwareReport, float | None]:
    """The hardware and measured bandwidth placement may believe of this node."""
    if node.hardware_verified or (config.trust_simulated_hardware and node.hardware.simulated):
        return node.hardware, node.measured_bandwidth_gb_s if node.hardware_verified else None
    floor = slowest_apple_bandwidth_gb_s()
    claimed = node.hardware.memory_bandwidth_gb_s
    conservative = min(claimed, floor) if claimed > 0 else 0.0
    measured = node.measured_bandwidth_gb_s  # a benchmark that did not fit: believed only downwards
    return (dataclasses.replace(node.hardware, memory_bandwidth_gb_s=conservative),
            measured if measured is not None and measured < floor else None)


def mac_candidates(nodes: list[NodeRecord], committed: dict[str, job_rows.Commitment],
                   now_ms: int, config: CoordinatorConfig,
                   reputations: dict[str, float] | None = None) -> tuple[MacCandidate, ...]:
    candidates = []
    for node in nodes:
        memory, running, shared = committed.get(node.node_id, (0, 0, ()))
        lending = node.lending
        hardware, measured_bandwidth_gb_s = placement_figures(node, config)
        candidates.append(MacCandidate(
            node_id=node.node_id, hardware=hardware,
            online=(now_ms - node.last_heartbeat_ms <= config.node_offline_after_ms
                    and node.left_at_ms is None),
            committed_memory_bytes=memory, running_jobs=running, shared_memory=shared,
            max_concurrent_jobs=node.max_concurrent_jobs,
            served_models=frozenset(m.model_id for m in node.models),
            warm_models=frozenset(node.warm_models),
            mode=LendingMode.IDLE if lending.mode is NodeLendingMode.IDLE else LendingMode.DEDICATED,
            # A node whose terms forbid work now (owner back, battery, heat, schedule) is
            # filtered like an owner at the keyboard: it will take work again later.
            owner_active=lending.owner_active or not lending.accepting_jobs,
            memory_cap_bytes=lending.memory_cap_bytes,
            measured_bandwidth_gb_s=measured_bandwidth_gb_s,
            # Believed once its benchmark fits its chip; until then the conservative default (speed.batch_share).
            batch_decode_tokens_per_s=node.batch_decode_tokens_per_s if node.hardware_verified else (),
            reputation=(reputations or {}).get(node.node_id, 1.0),
        ))
    return tuple(candidates)


def pod_candidates(pods: list[PodDeclaration], node_ids: set[str]) -> tuple[PodCandidate, ...]:
    """Declared pods whose members have all registered; the planner checks they are online."""
    return tuple(
        PodCandidate(pod_id=pod.pod_id, members=pod.members, links=tuple(
            PodLink(cable.a, cable.b, cable.kind, cable.cables) for cable in pod.cables))
        for pod in pods if pod.cables and set(pod.members) <= node_ids)


def usable_macs(nodes: list[NodeRecord], trust: dict[str, check_store.NodeTrust],
                committed: dict[str, job_rows.Commitment], now_ms: int,
                config: CoordinatorConfig) -> tuple[MacCandidate, ...]:
    """Candidates for these nodes; quarantined nodes (failed checks) are left out entirely."""
    usable = [n for n in nodes if n.node_id not in trust or trust[n.node_id].quarantined_at_ms is None]
    reputations = {n.node_id: reputation(trust[n.node_id].record if n.node_id in trust
                                         else TrustRecord(), config.trust) for n in usable}
    return mac_candidates(usable, committed, now_ms, config, reputations)


def snapshot(session: Session, now_ms: int, config: CoordinatorConfig) -> tuple[FleetSnapshot, list[NodeRecord]]:
    """The fleet placement may use."""
    fleet, nodes, _ = snapshot_with_commitments(session, now_ms, config)
    return fleet, nodes


def snapshot_with_commitments(session: Session, now_ms: int, config: CoordinatorConfig
                              ) -> tuple[FleetSnapshot, list[NodeRecord], dict[str, job_rows.Commitment]]:
    """The fleet, and the commitments it was built with (one read, so the two agree)."""
    nodes = node_rows.all_nodes(session)
    committed = job_rows.committed_by_node(session)
    macs = usable_macs(nodes, check_store.all_node_trust(session), committed, now_ms, config)
    pods = pod_candidates(node_rows.all_pods(session), {mac.node_id for mac in macs})
    return FleetSnapshot(macs=macs, pods=pods), nodes, committed


@dataclass(frozen=True)
class FreshMacs:
    macs: dict[NodeId, MacCandidate | None]  # None: unknown or quarantined
    nodes: list[NodeRecord]  # the records read, quarantined ones too
    committed: dict[str, job_rows.Commitment]  # as committed_by_node, for these nodes


def fresh_macs(session: Session, node_ids: list[str], now_ms: int, config: CoordinatorConfig) -> FreshMacs:
    """These nodes as the planner sees them now."""
    nodes = node_rows.nodes_by_ids(session, node_ids)
    committed = job_rows.committed_for_nodes(session, node_ids)
    macs = usable_macs(nodes, check_store.trust_of_nodes(session, node_ids), committed, now_ms, config)
    fresh: dict[NodeId, MacCandidate | None] = {NodeId(node_id): None for node_id in node_ids}
    fresh.update({mac.node_id: mac for mac in macs})
    return FreshMacs(fresh, nodes, committed)
