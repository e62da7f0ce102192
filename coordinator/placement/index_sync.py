"""Bringing a long-lived FleetIndex up to date with fresh facts, Mac by Mac and pod by pod.

The coordinator keeps one index across scheduling passes; when it learns that some
Macs changed (a heartbeat, a registration, a commitment made elsewhere) it re-reads
just those and applies them here. The result equals an index built from scratch over
the same facts (tests/coordinator/placement/test_index_sync.py checks it).
"""

from __future__ import annotations

from collections.abc import Mapping

from contracts.ids import NodeId
from coordinator.placement.candidates import MacCandidate, PodCandidate
from coordinator.placement.index import FleetIndex


def apply_macs(index: FleetIndex, fresh: Mapping[NodeId, MacCandidate | None]) -> bool:
    """Replace, add or remove each Mac (None: gone from the fleet); True when Macs came or went.

    A Mac that goes takes its pods with it; pods are re-added by apply_pods.
    """
    came_or_went = False
    for node_id, mac in fresh.items():
        if mac is None:
            if index.has_mac(node_id):
                for pod_id in index.pod_ids_of(node_id):
                    index.remove_pod(pod_id)
                index.remove_mac(node_id)
                came_or_went = True
            continue
        assert mac.node_id == node_id, "facts filed under another node's id"
        came_or_went |= not index.has_mac(node_id)
        index.replace_mac(mac)
    return came_or_went


def apply_pods(index: FleetIndex, pods: tuple[PodCandidate, ...]) -> None:
    """Make the index's pods exactly these; a pod whose declaration changed is re-added."""
    wanted = {pod.pod_id: pod for pod in pods}
    assert len(wanted) == len(pods), "pod ids must be distinct"
    for pod_id, current in index.pods().items():
        if wanted.get(pod_id) != current:
            index.remove_pod(pod_id)
    indexed = index.pods()
    for pod in pods:
        if pod.pod_id not in indexed:
            index.add_pod(pod)
