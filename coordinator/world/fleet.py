"""The public fleet, pure: query parsing, a Mac's status and reputation, and the rows served.

Everything a public page shows about a Mac is chosen here, field by field, so
nothing the operator did not mean to publish (operator id, session, keys,
prompts) can leak by accident.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from contracts.hardware import ChipTier, LinkKind
from contracts.lending import LendingMode
from contracts.limits import ascii_int, shown
from coordinator.errors import InvalidRequest

PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 200
PAGE_MAX = 100_000  # with PAGE_SIZE_MAX, 20 million Macs: more than the network will hold
QUERY_CHARS_MAX = 64
FILTER_CHARS_MAX = 128
REGION_CHARS_MAX = 64
WARM_MODELS_SHOWN_MAX = 8
CHALLENGE_REASON_SHOWN_CHARS = 1_000

E = TypeVar("E", bound=StrEnum)


class NodeStatus(StrEnum):
    ONLINE = "online"  # heartbeating, no job running
    BUSY = "busy"  # heartbeating and running at least one job
    OFFLINE = "offline"  # heartbeats stopped, or the node left the network


class FleetSort(StrEnum):
    JOINED = "joined"  # newest first: a Mac that just joined is on the first page
    NAME = "name"
    MEMORY = "memory"  # largest first
    BANDWIDTH = "bandwidth"  # fastest first


@dataclass(frozen=True)
class FleetQuery:
    page: int = 1  # 1-based
    page_size: int = PAGE_SIZE_DEFAULT
    q: str = ""  # substring of the display name, or a node id prefix
    status: NodeStatus | None = None
    chip: str | None = None  # exact chip name, e.g. "Apple M3 Ultra"
    tier: ChipTier | None = None
    mode: LendingMode | None = None
    region: str | None = None
    sort: FleetSort = FleetSort.JOINED

    def __post_init__(self) -> None:
        assert 1 <= self.page <= PAGE_MAX and 1 <= self.page_size <= PAGE_SIZE_MAX
        assert len(self.q) <= QUERY_CHARS_MAX

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.page_size


def int_param(params: Mapping[str, str], name: str, default: int, high: int) -> int:
    """A query parameter that must be a whole number from 1 to high; default when absent."""
    text = params.get(name, "").strip()
    if not text:
        return default
    value = ascii_int(text)  # "²" and "٣" are digits to str.isdigit, not to int()
    if value is None or not 1 <= value <= high:
        raise InvalidRequest(f"{name} must be a whole number from 1 to {high} in digits 0-9, "
                             f"not '{shown(text, 20)}'", param=name)
    return value


def _enum_param(params: Mapping[str, str], name: str, kind: type[E]) -> E | None:
    text = params.get(name, "").strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise InvalidRequest(f"{name} must be one of {choices}; got {text[:20]!r}", param=name) from None


def _text_param(params: Mapping[str, str], name: str, chars_max: int) -> str:
    text = params.get(name, "").strip()
    if len(text) > chars_max:
        raise InvalidRequest(f"{name} is longer than {chars_max} characters", param=name)
    return text


def parse_fleet_query(params: Mapping[str, str]) -> FleetQuery:
    """A FleetQuery from URL parameters; InvalidRequest names the parameter at fault."""
    return FleetQuery(
        page=int_param(params, "page", 1, PAGE_MAX),
        page_size=int_param(params, "page_size", PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX),
        q=_text_param(params, "q", QUERY_CHARS_MAX),
        status=_enum_param(params, "status", NodeStatus),
        chip=_text_param(params, "chip", FILTER_CHARS_MAX) or None,
        tier=_enum_param(params, "tier", ChipTier),
        mode=_enum_param(params, "mode", LendingMode),
        region=_text_param(params, "region", REGION_CHARS_MAX) or None,
        sort=_enum_param(params, "sort", FleetSort) or FleetSort.JOINED,
    )


def node_status(last_heartbeat_ms: int, left_at_ms: int | None, active_jobs: int, now_ms: int,
                offline_after_ms: int) -> NodeStatus:
    """The same online rule the scheduler uses: a fresh heartbeat and not left."""
    if left_at_ms is not None or now_ms - last_heartbeat_ms > offline_after_ms:
        return NodeStatus.OFFLINE
    return NodeStatus.BUSY if active_jobs > 0 else NodeStatus.ONLINE


def lendable_bytes(gpu_working_set_bytes: int, memory_cap_bytes: int | None) -> int:
    """What the network may use of a Mac: its GPU budget, capped by the operator."""
    if memory_cap_bytes is None:
        return gpu_working_set_bytes
    return min(gpu_working_set_bytes, memory_cap_bytes)


@dataclass(frozen=True)
class NodeFacts:
    """One Mac as stored, reduced to what a public page may show."""

    node_id: str
    display_name: str
    chip: str
    chip_tier: str
    memory_bytes: int
    gpu_working_set_bytes: int
    gpu_cores: int
    declared_bandwidth_gb_s: float
    measured_bandwidth_gb_s: float | None
    benchmark_flagged: bool
    simulated: bool
    mode: str
    accepting_jobs: bool
    lending_reason: str
    memory_cap_bytes: int | None
    warm_models: tuple[str, ...]
    served_models: tuple[str, ...]
    registered_at_ms: int
    last_heartbeat_ms: int
    left_at_ms: int | None
    # Why its latest challenge benchmark failed (None: none failed), and when one last passed its
    # replay (None: never): the ground for the Ultra-seat bonus (coordinator/nodes/spot_benchmarks.py).
    challenge_flag: str | None = None
    challenge_passed_at_ms: int | None = None


def challenge_state(challenge_flag: str | None, challenge_passed_at_ms: int | None) -> str:
    """"failed", "passed" (its tokens passed the coordinator's replay), or "none" yet."""
    if challenge_flag is not None:
        return "failed"
    return "passed" if challenge_passed_at_ms is not None else "none"


@dataclass(frozen=True)
class NodeStats:
    active_jobs: int = 0
    jobs_served: int = 0  # completed with a verified receipt
    jobs_failed: int = 0  # ended failed while placed on this Mac
    tokens_generated: int = 0
    # From the proof checks (coordinator.verification): the reputation placement itself uses.
    reputation: float = 1.0
    checks_passed: int = 0
    checks_failed: int = 0
    quarantined: bool = False

    def __post_init__(self) -> None:
        assert 0.0 <= self.reputation <= 1.0


def fleet_row(node: NodeFacts, stats: NodeStats, region: str | None, pod_id: str | None,
              now_ms: int, offline_after_ms: int) -> dict[str, object]:
    """The public JSON of one Mac (documented in coordinator/world/API.md)."""
    status = node_status(node.last_heartbeat_ms, node.left_at_ms, stats.active_jobs, now_ms,
                         offline_after_ms)
    return {
        "node_id": node.node_id,
        "name": node.display_name,
        "chip": node.chip,
        "tier": node.chip_tier,
        "memory_bytes": node.memory_bytes,
        "lendable_bytes": lendable_bytes(node.gpu_working_set_bytes, node.memory_cap_bytes),
        "gpu_cores": node.gpu_cores,
        "bandwidth_gb_s": node.declared_bandwidth_gb_s,
        "measured_bandwidth_gb_s": node.measured_bandwidth_gb_s,
        "benchmark_flagged": node.benchmark_flagged,
        "challenge": challenge_state(node.challenge_flag, node.challenge_passed_at_ms),
        "challenge_reason": (node.challenge_flag or "")[:CHALLENGE_REASON_SHOWN_CHARS],
        "simulated": node.simulated,
        "region": region,
        "mode": node.mode,
        "status": status.value,
        "accepting_jobs": node.accepting_jobs,
        "not_accepting_reason": "" if node.accepting_jobs else node.lending_reason,
        "warm_models": list(node.warm_models[:WARM_MODELS_SHOWN_MAX]),
        "models": list(node.served_models[:WARM_MODELS_SHOWN_MAX]),
        "jobs_served": stats.jobs_served,
        "tokens_generated": stats.tokens_generated,
        "jobs_failed": stats.jobs_failed,
        "reputation": round(stats.reputation, 4),
        "checks": {"passed": stats.checks_passed, "failed": stats.checks_failed,
                   "quarantined": stats.quarantined},
        "pod_id": pod_id,
        "joined_at_ms": node.registered_at_ms,
        "last_seen_ms": node.last_heartbeat_ms,
    }


def page_payload(query: FleetQuery, total: int, rows: list[dict[str, object]],
                 version: int) -> dict[str, object]:
    assert len(rows) <= query.page_size
    pages = max(1, -(-total // query.page_size))
    return {"page": query.page, "page_size": query.page_size, "total": total, "pages": pages,
            "offset": query.offset, "version": version, "nodes": rows}


# --- pods ----------------------------------------------------------------

@dataclass(frozen=True)
class PodLinkFacts:
    a: str
    b: str
    kind: LinkKind
    cables: int


def pod_strategy(members: tuple[str, ...], links: tuple[PodLinkFacts, ...]) -> str:
    """Tensor parallel needs RDMA on a cable between every pair; otherwise a pipeline.

    The planner also needs the model's heads to divide by the member count, so a
    tensor-capable pod may still run some models as a pipeline.
    """
    linked = {frozenset((link.a, link.b)) for link in links}
    every_pair = all(frozenset(pair) in linked for pair in itertools.combinations(members, 2))
    all_rdma = bool(links) and all(link.kind is LinkKind.RDMA_TB5 for link in links)
    return "tensor" if every_pair and all_rdma else "pipeline"


def pod_payload(pod_id: str, members: tuple[str, ...], links: tuple[PodLinkFacts, ...],
                member_rows: Mapping[str, Mapping[str, object]]) -> dict[str, object]:
    """A pod as drawn: its members (in rank order), its cables and its strategy."""
    statuses = [member_rows[m]["status"] for m in members if m in member_rows]
    online = len(statuses) == len(members) and NodeStatus.OFFLINE.value not in statuses
    return {
        "pod_id": pod_id,
        "strategy": pod_strategy(members, links),
        "online": online,
        "members": [{"node_id": m, "name": member_rows[m]["name"] if m in member_rows else m,
                     "chip": member_rows[m]["chip"] if m in member_rows else "",
                     "status": member_rows[m]["status"] if m in member_rows else "offline"}
                    for m in members],
        "links": [{"a": link.a, "b": link.b, "kind": link.kind.value,
                   "transport": "RDMA" if link.kind is LinkKind.RDMA_TB5 else "TCP",
                   "cables": link.cables} for link in links],
        "lendable_bytes": sum(int(member_rows[m]["lendable_bytes"]) for m in members  # type: ignore[call-overload]
                              if m in member_rows),
    }
