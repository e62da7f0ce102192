"""A pod: Macs cabled together on one desk, run as one unit by MLX's distributed engine.

The leader declares it (members and the cables between them); the coordinator
places a job on it as one candidate; the leader starts every rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contracts.hardware import LinkKind
from contracts.ids import NodeId

POD_MEMBERS_MAX = 16
POD_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class PodCable:
    """One cable (or bonded cables) between two members."""

    a: NodeId
    b: NodeId
    kind: LinkKind
    cables: int = 1

    def __post_init__(self) -> None:
        assert self.a != self.b, "a cable joins two different Macs"
        assert self.cables >= 1


@dataclass(frozen=True)
class PodDeclaration:
    pod_id: str
    leader: NodeId
    members: tuple[NodeId, ...]  # rank order: the leader first
    cables: tuple[PodCable, ...]


def pod_problems(pod: PodDeclaration) -> list[str]:
    """Why a declaration is unusable, as sentences that say what to fix; empty when fine."""
    problems = []
    if not POD_ID_PATTERN.fullmatch(pod.pod_id):
        problems.append("pod_id must be 1 to 128 letters, digits, '.', '_' or '-'")
    if not 2 <= len(pod.members) <= POD_MEMBERS_MAX:
        problems.append(f"a pod has 2 to {POD_MEMBERS_MAX} members")
    if len(set(pod.members)) != len(pod.members):
        problems.append("pod members must be distinct")
    if pod.members and pod.members[0] != pod.leader:
        problems.append("the leader must be the first member (rank 0)")
    member_set = set(pod.members)
    if any(cable.a not in member_set or cable.b not in member_set for cable in pod.cables):
        problems.append("every cable must join two members of the pod")
    if len(pod.members) >= 2 and not _connected(pod):
        problems.append("every member must be cabled to the others (the cables form no single group)")
    return problems


def _connected(pod: PodDeclaration) -> bool:
    reached = {pod.members[0]}
    frontier = [pod.members[0]]
    while frontier:
        node = frontier.pop()
        for cable in pod.cables:
            for here, there in ((cable.a, cable.b), (cable.b, cable.a)):
                if here == node and there not in reached:
                    reached.add(there)
                    frontier.append(there)
    return reached == set(pod.members)
