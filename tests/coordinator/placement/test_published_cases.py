"""The brief's published cases, through the scheduler harness."""

from __future__ import annotations

import json

from contracts.hardware import LinkKind
from coordinator.placement import CandidateKind, FilterReason, ScoreName, Strategy
from tests.coordinator.placement.harness import (
    KIMI_K2_4BIT, KIMI_K2_ACTIVE_BYTES, LLAMA_70B_4BIT, M3_ULTRA, M4, M4_MAX, M4_PRO, QWEN3_4B_4BIT, Fleet, job,
    must_place,
)

EVERYDAY = (QWEN3_4B_4BIT, LLAMA_70B_4BIT)


def _desk_fleet() -> Fleet:
    """One of each common Mac, plus two 4x M3 Ultra 512 GB pods: one RDMA, one TCP."""
    fleet = Fleet()
    for chip, memory in ((M4, 16), (M4_PRO, 24), (M4_MAX, 64), (M3_ULTRA, 512)):
        fleet.mac(chip, memory, EVERYDAY)
    return fleet


def _kimi_job(**extra):
    return job(KIMI_K2_4BIT, context_tokens=8192, active_weights_bytes=KIMI_K2_ACTIVE_BYTES, **extra)


def test_one_trillion_parameters_at_4_bit_go_to_the_rdma_ultra_pod_in_tensor_parallel() -> None:
    fleet = _desk_fleet()
    members = fleet.pod("ultra-rdma", M3_ULTRA, 512, 4, LinkKind.RDMA_TB5, (KIMI_K2_4BIT,))
    placement = must_place(fleet.place(_kimi_job()))
    assert placement.pod_id == "ultra-rdma" and placement.node_ids == members
    assert placement.strategy is Strategy.TENSOR
    assert placement.layer_split == (61,) * 4  # every member holds a shard of every layer
    need = placement.explanation.memory.total_bytes
    assert need > 384 * 2**30, "too big for any single Mac"
    assert sum(placement.reserved_memory_bytes) >= need and len(set(placement.reserved_memory_bytes)) == 1
    # The published figure is about 30 tok/s; our bandwidth model with η 0.5 lands in that range.
    assert 15 < placement.predicted_decode_tokens_per_s < 80


def test_the_same_pod_over_tcp_runs_a_pipeline_split_by_memory() -> None:
    fleet = _desk_fleet()
    fleet.pod("ultra-tcp", M3_ULTRA, 512, 4, LinkKind.TCP_THUNDERBOLT, (KIMI_K2_4BIT,))
    placement = must_place(fleet.place(_kimi_job()))
    assert placement.strategy is Strategy.PIPELINE and placement.pod_id == "ultra-tcp"
    assert placement.layer_split == (16, 15, 15, 15)
    assert placement.reserved_memory_bytes[0] > placement.reserved_memory_bytes[1]


def test_tensor_beats_pipeline_when_both_pods_are_free() -> None:
    fleet = _desk_fleet()
    fleet.pod("ultra-tcp", M3_ULTRA, 512, 4, LinkKind.TCP_THUNDERBOLT, (KIMI_K2_4BIT,))
    fleet.pod("ultra-rdma", M3_ULTRA, 512, 4, LinkKind.RDMA_TB5, (KIMI_K2_4BIT,))
    placement = must_place(fleet.place(_kimi_job(min_speed=20)))
    assert placement.pod_id == "ultra-rdma"
    top = placement.explanation.top_candidates
    assert [c.candidate_id for c in top] == ["ultra-rdma"]  # the TCP pipeline is below 20 tok/s
    assert placement.explanation.filtered_count(FilterReason.BELOW_MIN_SPEED, CandidateKind.POD) == 1


def test_a_4b_model_goes_to_the_smallest_mac_that_meets_its_speed_need() -> None:
    fleet = _desk_fleet()
    fleet.pod("ultra-rdma", M3_ULTRA, 512, 4, LinkKind.RDMA_TB5, EVERYDAY)
    placement = must_place(fleet.place(job(QWEN3_4B_4BIT, min_speed=30)))
    chosen = fleet.macs[placement.node_ids[0]]
    assert chosen.hardware.chip == "Apple M4 Pro", placement.explanation.render()
    assert placement.strategy is Strategy.SINGLE and placement.pod_id is None
    assert placement.predicted_decode_tokens_per_s >= 30
    explanation = placement.explanation
    assert explanation.filtered_count(FilterReason.BELOW_MIN_SPEED) == 1  # the base M4 mini: about 21 tok/s
    assert not explanation.pods_considered
    ranked = [fleet.macs[c.candidate_id].hardware.chip for c in explanation.top_candidates]
    assert ranked[0] == "Apple M4 Pro" and "Apple M3 Ultra" in ranked[1:]
    scores = dict(explanation.top_candidates[0].scores)
    assert set(scores) == set(ScoreName) and scores[ScoreName.SPEED] == 1.0


def test_without_a_speed_need_the_4b_model_takes_the_tightest_fit() -> None:
    placement = must_place(_desk_fleet().place(job(QWEN3_4B_4BIT)))
    assert placement.node_ids[0].startswith("node-m4-base-16")


def test_explanation_is_json_and_renders_for_a_cli() -> None:
    fleet = _desk_fleet()
    fleet.pod("ultra-tcp", M3_ULTRA, 512, 4, LinkKind.TCP_THUNDERBOLT, (KIMI_K2_4BIT,))
    placement = must_place(fleet.place(_kimi_job()))
    data = json.loads(json.dumps(placement.explanation.to_dict()))
    assert data["chosen"] == "ultra-tcp" and data["pods"]["considered"] is True
    assert data["macs"]["filtered"] == {"model_not_served": 4, "does_not_fit": 4}
    assert data["memory"]["total_bytes"] == placement.explanation.memory.total_bytes
    text = placement.explanation.render()
    assert "filtered does_not_fit: 4" in text and "*1. pod ultra-tcp (pipeline)" in text
