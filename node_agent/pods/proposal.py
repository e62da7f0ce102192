"""Propose a pod from the Thunderbolt peers each Mac sees. Pure.

Two links are the two ends of one cable when each one's peer_uid is the
other's local_domain_uuid. A cable is RDMA when it is Thunderbolt 5 and both
Macs have RDMA enabled (rdma_ctl); otherwise the pod talks TCP over it. The
pod is the group of Macs cabled to the first one (the leader).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from contracts.hardware import LinkKind
from contracts.pods import POD_MEMBERS_MAX
from node_agent.lending.config import PodConfig, PodLinkConfig


class PodProposalError(ValueError):
    """The reports describe no pod; the message says what is missing."""


@dataclass(frozen=True)
class MemberReport:
    node_id: str
    hostname: str
    rdma_enabled: bool
    links: tuple[tuple[str, str, int], ...]  # (local_domain_uuid, peer_uid, thunderbolt_version)


def member_from_json(data: dict) -> MemberReport:  # type: ignore[type-arg]
    """From `mlxnet node hardware` output: {"node_id", "hostname", "hardware": {...}}."""
    try:
        hardware = data["hardware"]
        links = tuple((link["local_domain_uuid"], link["peer_uid"], int(link["thunderbolt_version"]))
                      for link in hardware["thunderbolt_links"])
        return MemberReport(str(data["node_id"]), str(data["hostname"]),
                            bool(hardware["rdma_enabled"]), links)
    except (KeyError, TypeError) as error:
        raise PodProposalError(f"not `mlxnet node hardware` output: missing {error}") from error


def cables(members: list[MemberReport]) -> Counter[tuple[str, str, LinkKind]]:
    """(node a, node b, kind) -> number of cables, with a < b."""
    owner = {uuid: m for m in members for uuid, _, _ in m.links if uuid}
    found: Counter[tuple[str, str, LinkKind]] = Counter()
    for member in members:
        for local, peer, version in member.links:
            other = owner.get(peer)
            if other is None or other is member or not local:
                continue
            if not any(their_peer == local for _, their_peer, _ in other.links):
                continue  # one-sided: not the same cable
            if member.node_id > other.node_id:
                continue  # count each cable once, from its lower-id end
            rdma = version >= 5 and member.rdma_enabled and other.rdma_enabled
            kind = LinkKind.RDMA_TB5 if rdma else LinkKind.TCP_THUNDERBOLT
            found[(member.node_id, other.node_id, kind)] += 1
    return found


def propose_pod_config(pod_id: str, reports: list[dict]) -> PodConfig:  # type: ignore[type-arg]
    members = [member_from_json(report) for report in reports]
    if len({m.node_id for m in members}) != len(members):
        raise PodProposalError("the same node appears twice")
    found = cables(members)
    leader = members[0]
    group = {leader.node_id}
    grew = True
    while grew:
        grew = False
        for a, b, _ in found:
            if (a in group) != (b in group):
                group |= {a, b}
                grew = True
    ordered = [m for m in members if m.node_id in group][:POD_MEMBERS_MAX]
    if len(ordered) < 2:
        raise PodProposalError(f"{leader.hostname} shares no cable with the other Macs: no "
                               "Thunderbolt link's peer is another member's port")
    links = tuple(PodLinkConfig(a, b, kind, count) for (a, b, kind), count in sorted(found.items())
                  if a in group and b in group)
    return PodConfig(pod_id=pod_id, members=tuple(m.node_id for m in ordered),
                     hosts=tuple(f"{m.hostname}" for m in ordered),
                     ips=tuple("" for _ in ordered), links=links)
