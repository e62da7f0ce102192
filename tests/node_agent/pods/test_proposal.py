"""Pods proposed from the Thunderbolt peers each Mac sees, on the recorded Studio <-> MacBook cable."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from contracts.hardware import LinkKind
from node_agent.hardware import parse_thunderbolt_json, thunderbolt_links, simulated_profile
from node_agent.pods.proposal import PodProposalError, propose_pod_config

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "macos" / "recorded"
STUDIO = "mac-studio-m3-ultra-cabled-to-macbook-SPThunderboltDataType.json"
MACBOOK = "macbook-pro-m5-max-cabled-to-studio-SPThunderboltDataType.json"


def _report(node_id: str, hostname: str, fixture: str | None, rdma: bool) -> dict:  # type: ignore[type-arg]
    links = thunderbolt_links(parse_thunderbolt_json((RECORDED / fixture).read_text())) if fixture else ()
    hardware = dataclasses.replace(simulated_profile("m3-ultra-512"), thunderbolt_links=links,
                                   rdma_enabled=rdma)
    return {"node_id": node_id, "hostname": hostname, "hardware": dataclasses.asdict(hardware)}


def test_the_recorded_cable_joins_the_studio_and_the_macbook_over_rdma() -> None:
    pod = propose_pod_config("desk", [_report("node-studio", "studio", STUDIO, True),
                                      _report("node-macbook", "macbook", MACBOOK, True)])
    assert pod.members == ("node-studio", "node-macbook") and pod.hosts == ("studio", "macbook")
    (link,) = pod.links
    assert (link.a, link.b, link.kind, link.cables) == ("node-macbook", "node-studio",
                                                         LinkKind.RDMA_TB5, 1)


def test_without_rdma_on_both_ends_the_cable_carries_tcp() -> None:
    pod = propose_pod_config("desk", [_report("node-studio", "studio", STUDIO, True),
                                      _report("node-macbook", "macbook", MACBOOK, False)])
    assert [link.kind for link in pod.links] == [LinkKind.TCP_THUNDERBOLT]


def test_macs_with_no_shared_cable_make_no_pod() -> None:
    with pytest.raises(PodProposalError, match="shares no cable"):
        propose_pod_config("desk", [_report("node-studio", "studio", STUDIO, True),
                                    _report("node-mini", "mini", None, True)])
    with pytest.raises(PodProposalError, match="missing"):
        propose_pod_config("desk", [{"node_id": "x"}])
