"""What a node reports about the machine it runs on."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class ChipTier(StrEnum):
    BASE = "base"
    PRO = "pro"
    MAX = "max"
    ULTRA = "ultra"
    NOT_APPLE = "not_apple"  # a Linux or Intel host running MLX on the CPU


class LinkKind(StrEnum):
    RDMA_TB5 = "rdma_tb5"  # Thunderbolt 5 with rdma_ctl enabled on both ends
    TCP_THUNDERBOLT = "tcp_thunderbolt"
    ETHERNET = "ethernet"


@dataclass(frozen=True)
class ThunderboltLink:
    """One cabled Thunderbolt port and the Mac at its other end."""

    port: str  # e.g. "bus_1"
    speed_gbps: int  # negotiated link speed, e.g. 80
    thunderbolt_version: int  # 4 or 5
    peer_model_identifier: str  # e.g. "Mac15,14"
    peer_name: str  # marketing name, e.g. "Mac Studio"
    peer_uid: str  # the peer's Thunderbolt domain UUID (peers publish no switch UID)
    peer_rdma_capable: bool
    # This port's own domain UUID. A cable joins link a and link b when
    # a.peer_uid == b.local_domain_uuid and b.peer_uid == a.local_domain_uuid.
    local_domain_uuid: str = ""


@dataclass(frozen=True)
class HardwareReport:
    chip: str  # "Apple M3 Ultra", or the CPU brand on other hosts
    chip_family: str  # "M3"; empty when not Apple silicon
    chip_tier: ChipTier
    memory_bytes: int  # unified memory (hw.memsize) or host RAM
    gpu_working_set_bytes: int  # GPU budget; equals memory_bytes on the CPU build
    gpu_cores: int  # 0 when unknown
    memory_bandwidth_gb_s: float  # from the chip table; 0.0 when unknown
    os_name: str  # e.g. "macOS 26.2" or "Linux 6.1.0"
    model_identifier: str = ""  # e.g. "Mac15,14"
    thunderbolt_links: tuple[ThunderboltLink, ...] = ()
    rdma_enabled: bool = False
    simulated: bool = False  # declared with --profile, not read from the machine

    def __post_init__(self) -> None:
        assert self.memory_bytes > 0, "memory_bytes must be positive"
        assert 0 < self.gpu_working_set_bytes <= self.memory_bytes
        assert math.isfinite(self.memory_bandwidth_gb_s) and self.memory_bandwidth_gb_s >= 0
