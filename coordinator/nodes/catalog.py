"""Which models the fleet serves, from what the nodes declared at registration."""

from __future__ import annotations

from collections.abc import Iterable

from contracts.models import ModelSpec
from coordinator.model import NodeRecord


def model_catalog(nodes: Iterable[NodeRecord]) -> dict[str, ModelSpec]:
    """model_id -> spec; when nodes disagree, the first registered node's spec wins."""
    catalog: dict[str, ModelSpec] = {}
    for node in sorted(nodes, key=lambda n: (n.registered_at_ms, n.node_id)):
        for spec in node.models:
            catalog.setdefault(spec.model_id, spec)
    return catalog
