"""Turning a search's choice into a Placement, and its findings into an Explanation."""

from __future__ import annotations

from contracts.ids import NodeId
from coordinator.placement.candidates import MacCandidate, PodCandidate
from coordinator.placement.config import PlacementConfig
from coordinator.placement.decision import Placement
from coordinator.placement.explain import Explanation, RankedCandidate
from coordinator.placement.pods import fit_pod
from coordinator.placement.scored import Scored
from coordinator.placement.speed import prefill_tokens_per_s, tensor_speedup, time_to_first_token_s
from coordinator.placement.terms import JobTerms
from coordinator.placement.vocabulary import CandidateKind, Strategy


def ranked_mac(mac: MacCandidate, scored: Scored, running: int) -> RankedCandidate:
    """running: the jobs running there now, as the index counts them."""
    return RankedCandidate(mac.node_id, CandidateKind.MAC, mac.reputation, mac.price_per_million_tokens, scored,
                           running, mac.max_concurrent_jobs)


def ranked_pod(pod: PodCandidate, members: tuple[MacCandidate, ...], scored: Scored,
               running: tuple[int, ...]) -> RankedCandidate:
    # A pod is as trustworthy as its least reputable member and costs all its members' time.
    reputation = min(mac.reputation for mac in members)
    price = sum(mac.price_per_million_tokens for mac in members)
    return RankedCandidate(pod.pod_id, CandidateKind.POD, reputation, price, scored, max(running),
                           min(mac.max_concurrent_jobs for mac in members))


def mac_placement(terms: JobTerms, mac: MacCandidate, chosen: Scored, explanation: Explanation,
                  config: PlacementConfig) -> Placement:
    job = terms.job
    decode = chosen.decode_tokens_per_s
    prefill = prefill_tokens_per_s(job, mac.hardware.gpu_cores, decode, 1.0, config.speed)
    load_bytes = 0 if chosen.warm else job.model.weights_bytes
    assert chosen.free_bytes >= terms.memory.total_bytes, "chose a Mac that cannot fit"
    return Placement(
        node_ids=(mac.node_id,), pod_id=None, strategy=Strategy.SINGLE, layer_split=(job.model.num_layers,),
        reserved_memory_bytes=(terms.memory.total_bytes,), predicted_decode_tokens_per_s=decode,
        predicted_prefill_tokens_per_s=prefill,
        predicted_time_to_first_token_s=time_to_first_token_s(job, prefill, decode, load_bytes, config.speed),
        explanation=explanation, job_id=job.job_id, score=chosen.total,
        shared_memory_bytes=terms.memory.batch_shared_bytes)


def pod_placement(terms: JobTerms, pod: PodCandidate, members: tuple[MacCandidate, ...], free: tuple[int, ...],
                  chosen: Scored, explanation: Explanation, config: PlacementConfig) -> Placement:
    job = terms.job
    fit = fit_pod(terms.memory, chosen.strategy, job.model.num_layers, free)
    assert fit is not None, "chose a pod whose members cannot hold their shares"
    decode = chosen.decode_tokens_per_s
    tensor = chosen.strategy is Strategy.TENSOR
    speedup = tensor_speedup(len(members), config.speed) if tensor else 1.0
    cores = min(mac.hardware.gpu_cores for mac in members)
    prefill = prefill_tokens_per_s(job, cores, decode, speedup, config.speed)
    # Members load their shares in parallel; the largest share sets the pace.
    largest_share = 1 / len(members) if tensor else max(fit.layer_split) / job.model.num_layers
    load_bytes = 0 if chosen.warm else int(job.model.weights_bytes * largest_share)
    return Placement(
        node_ids=tuple(NodeId(mac.node_id) for mac in members), pod_id=pod.pod_id, strategy=chosen.strategy,
        layer_split=fit.layer_split, reserved_memory_bytes=fit.shares_bytes,
        predicted_decode_tokens_per_s=decode, predicted_prefill_tokens_per_s=prefill,
        predicted_time_to_first_token_s=time_to_first_token_s(job, prefill, decode, load_bytes, config.speed),
        explanation=explanation, job_id=job.job_id, score=chosen.total)
