"""How an operator lends a Mac, and the signed heartbeat that proves it stayed online.

Shared by the node agent (which signs) and the coordinator (which verifies and
stores); it imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from contracts.ids import NodeId

HEARTBEAT_DOMAIN = b"mlxnet.heartbeat.v1"
REASON_CHARS_MAX = 256


class LendingMode(StrEnum):
    IDLE = "idle"  # works only while the owner is away, on AC power, not throttled
    DEDICATED = "dedicated"  # a dedicated seat: always on
    ULTRA_SEAT = "ultra_seat"  # a dedicated seat on an Ultra chip: earns the ledger's bonus

    @property
    def is_dedicated(self) -> bool:
        return self is not LendingMode.IDLE


@dataclass(frozen=True)
class LendingState:
    """What a node says about its lending terms right now, in Register and every heartbeat."""

    mode: LendingMode = LendingMode.IDLE
    owner_active: bool = False  # the owner is using the Mac (idle lending only)
    accepting_jobs: bool = True  # False while the operator's terms forbid new work
    reason: str = ""  # why not accepting, for `mlxnet node status` and MLX World
    memory_cap_bytes: int | None = None  # the operator's cap on memory lent; None means none

    def __post_init__(self) -> None:
        assert self.memory_cap_bytes is None or self.memory_cap_bytes > 0
        assert len(self.reason) <= REASON_CHARS_MAX, "reasons are short sentences"


@dataclass(frozen=True)
class Heartbeat:
    """The fields a node signs in each heartbeat. sent_at_ms is the node's clock."""

    node_id: NodeId
    sent_at_ms: int
    running_jobs: int
    lending: LendingState

    def __post_init__(self) -> None:
        assert self.sent_at_ms > 0 and self.running_jobs >= 0


def heartbeat_message(heartbeat: Heartbeat) -> bytes:
    """The exact bytes a node signs: domain, then fields joined by NUL, in this order."""
    lending = heartbeat.lending
    fields = (
        heartbeat.node_id, str(heartbeat.sent_at_ms), str(heartbeat.running_jobs),
        lending.mode.value, "1" if lending.owner_active else "0",
        "1" if lending.accepting_jobs else "0", str(lending.memory_cap_bytes or 0),
    )
    return HEARTBEAT_DOMAIN + b"\x00" + b"\x00".join(field.encode() for field in fields)
