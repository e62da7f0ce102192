"""The Grafana dashboard in observability/ uses only metrics that are exported: every metric
name in its queries is a series name of the coordinator's or the node's /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.config import CoordinatorConfig
from coordinator.service import CoordinatorService
from coordinator.storage.database import Database, upgrade_schema
from node_agent.metrics import NodeMetrics
from tests.coordinator.service.test_service import FakeClock

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "observability" / "grafana-dashboard.json"
_METRIC = re.compile(r"mlxnet:[A-Za-z0-9_:]+")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
             "unknown": ("",)}


def exported_names(text: str) -> set[str]:
    """Series names a scrape can carry, including histograms and counters with no samples yet."""
    return {family.name + suffix for family in text_string_to_metric_families(text)
            for suffix in _SUFFIXES[family.type]}


def dashboard_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    variables = [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return {name for query in [*queries, *variables] for name in _METRIC.findall(query)}


def test_every_metric_the_dashboard_uses_is_exported(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    upgrade_schema(url)
    db = Database(url)
    try:
        service = CoordinatorService(db, FakeClock(), CoordinatorConfig(database_url=url))
        exported = exported_names(service.core.metrics.exposition().decode())
    finally:
        db.dispose()
    exported |= exported_names(generate_latest(NodeMetrics().registry).decode())
    used = dashboard_metrics()
    assert len(used) >= 20  # the dashboard's queries were read, not an empty set
    assert used - exported == set()
