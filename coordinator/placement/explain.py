"""Why a decision came out as it did: filter counts by named reason and the top candidates' scores.

Every decision carries its Explanation. The top candidates' named scores are spelled out
from what the search kept (RankedCandidate) when first read, since most explanations are
stored as JSON once or never read: a decision does not pay for building them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import NamedTuple

from contracts.ids import JobId
from coordinator.placement.filters import FilterReason
from coordinator.placement.memory import MemoryEstimate
from coordinator.placement.scored import Scored
from coordinator.placement.scoring import ScoreName, named_scores, price_score_against
from coordinator.placement.vocabulary import CandidateKind, Strategy


GB = 1e9


@dataclass(frozen=True)
class CandidateScore:
    candidate_id: str  # a node id or a pod id
    kind: CandidateKind
    strategy: Strategy
    total: float  # weighted combination, 0..1
    scores: tuple[tuple[ScoreName, float], ...]  # each named score before weighting, 0..1
    free_memory_bytes: int  # a Mac: free for this model (what its running jobs of the model hold counts)
    predicted_decode_tokens_per_s: float
    slots_in_use: int = 0  # jobs running there now (a pod: its busiest member's)
    slots: int = 0  # jobs it runs at once, in one batch (a pod: its least member's)

    def to_dict(self) -> dict:
        return {"id": self.candidate_id, "kind": str(self.kind), "strategy": str(self.strategy),
                "total": round(self.total, 6), "scores": {str(n): round(v, 6) for n, v in self.scores},
                "free_memory_bytes": self.free_memory_bytes,
                "predicted_decode_tokens_per_s": round(self.predicted_decode_tokens_per_s, 3),
                "slots": {"in_use": self.slots_in_use, "total": self.slots}}


class RankedCandidate(NamedTuple):
    """A top candidate as the search scored it, with the facts its named scores need."""

    candidate_id: str  # a node id or a pod id
    kind: CandidateKind
    reputation: float  # a pod's least reputable member's
    price_per_million_tokens: int  # a pod's members' summed
    scored: Scored
    slots_in_use: int = 0  # as CandidateScore's
    slots: int = 0

    def score(self, price_reference_per_million_tokens: int) -> CandidateScore:
        scored = self.scored
        scores = named_scores(scored.fit, scored.speed, 1.0 if scored.warm else 0.0, self.reputation,
                              price_score_against(self.price_per_million_tokens, price_reference_per_million_tokens))
        return CandidateScore(self.candidate_id, self.kind, scored.strategy, scored.total, scores,
                              scored.free_bytes, scored.decode_tokens_per_s, self.slots_in_use, self.slots)


@dataclass(frozen=True)
class Explanation:
    job_id: JobId
    model_id: str
    memory: MemoryEstimate
    macs_total: int
    mac_filtered: tuple[tuple[FilterReason, int], ...]  # non-zero counts, in filter order
    macs_feasible: int
    macs_scored: int
    pods_total: int
    pods_considered: bool  # False when a single Mac took the job or must be waited for
    pod_filtered: tuple[tuple[FilterReason, int], ...]
    pods_feasible: int
    pods_scored: int
    # The top candidates, best first, as the search found them (see top_candidates). Not compared:
    # it holds positions in one index; equality compares top_candidates instead.
    ranked: tuple[RankedCandidate, ...] = field(compare=False)
    price_reference_per_million_tokens: int  # the config's, for the price score
    chosen_id: str | None
    notes: tuple[str, ...] = ()

    @functools.cached_property
    def top_candidates(self) -> tuple[CandidateScore, ...]:
        """Best first, each with its named scores (computed on first read, then kept)."""
        return tuple(ranked.score(self.price_reference_per_million_tokens) for ranked in self.ranked)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Explanation)
        return self._compared() == other._compared()

    def _compared(self) -> tuple:
        return (*(getattr(self, f.name) for f in fields(self) if f.compare), self.top_candidates)

    def filtered_count(self, reason: FilterReason, kind: CandidateKind = CandidateKind.MAC) -> int:
        counts = self.mac_filtered if kind == CandidateKind.MAC else self.pod_filtered
        return dict(counts).get(reason, 0)

    def to_dict(self) -> dict:
        """JSON-serialisable: strings, numbers, lists and dicts only."""
        return {
            "job_id": str(self.job_id), "model_id": self.model_id,
            "memory": {"weights_bytes": self.memory.weights_bytes, "kv_cache_bytes": self.memory.kv_cache_bytes,
                       "overhead_bytes": self.memory.overhead_bytes, "total_bytes": self.memory.total_bytes},
            "macs": {"total": self.macs_total, "filtered": {str(r): n for r, n in self.mac_filtered},
                     "feasible": self.macs_feasible, "scored": self.macs_scored},
            "pods": {"total": self.pods_total, "considered": self.pods_considered,
                     "filtered": {str(r): n for r, n in self.pod_filtered},
                     "feasible": self.pods_feasible, "scored": self.pods_scored},
            "top_candidates": [c.to_dict() for c in self.top_candidates],
            "chosen": self.chosen_id, "notes": list(self.notes),
        }

    def render(self) -> str:
        """Multi-line text for a CLI."""
        m = self.memory
        lines = [f"job {self.job_id} ({self.model_id}): needs {m.total_bytes / GB:.2f} GB "
                 f"= weights {m.weights_bytes / GB:.2f} + KV {m.kv_cache_bytes / GB:.2f} "
                 f"+ overhead {m.overhead_bytes / GB:.2f}",
                 f"Macs: {self.macs_total} total, {self.macs_feasible} feasible, {self.macs_scored} scored"]
        lines += [f"  filtered {reason}: {count}" for reason, count in self.mac_filtered]
        if self.pods_considered:
            lines.append(f"pods: {self.pods_total} total, {self.pods_feasible} feasible, {self.pods_scored} scored")
            lines += [f"  filtered {reason}: {count}" for reason, count in self.pod_filtered]
        else:
            lines.append(f"pods: {self.pods_total} total, not considered")
        for rank, candidate in enumerate(self.top_candidates, start=1):
            scores = ", ".join(f"{name} {value:.3f}" for name, value in candidate.scores)
            marker = "*" if candidate.candidate_id == self.chosen_id else " "
            lines.append(f"{marker}{rank}. {candidate.kind} {candidate.candidate_id} ({candidate.strategy}) "
                         f"score {candidate.total:.4f}: {scores}; "
                         f"{candidate.predicted_decode_tokens_per_s:.1f} tok/s, "
                         f"{candidate.free_memory_bytes / GB:.1f} GB free, "
                         f"{candidate.slots_in_use} of {candidate.slots} slots in use")
        lines += [f"note: {note}" for note in self.notes]
        lines.append(f"chosen: {self.chosen_id}" if self.chosen_id else "chosen: none")
        return "\n".join(lines)
