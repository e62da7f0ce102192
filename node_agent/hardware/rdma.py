"""Parse `rdma_ctl status` (macOS 26.2+): RDMA over Thunderbolt enabled or not.

The command prints one word, "enabled" or "disabled". RDMA can only be turned
on from recoveryOS (`rdma_ctl enable`), so a node cannot fix this by itself.
"""

from __future__ import annotations

from node_agent.hardware.errors import HardwareParseError

RDMA_CTL_STATUS_ARGV = ("rdma_ctl", "status")


def parse_rdma_status(text: str) -> bool:
    """True for "enabled", False for "disabled"; anything else is a parse error."""
    words = text.strip().lower().split()
    if words[-1:] == ["enabled"] and "not" not in words:
        return True
    if words[-1:] == ["disabled"] or words[-2:] == ["not", "enabled"]:
        return False
    raise HardwareParseError(f"unknown rdma_ctl status output: {text.strip()[:80]!r}")
