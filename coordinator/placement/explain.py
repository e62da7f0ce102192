"""Why a decision came out as it did: filter counts by named reason and the top candidates' scores."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.ids import JobId
from coordinator.placement.filters import FilterReason
from coordinator.placement.memory import MemoryEstimate
from coordinator.placement.scoring import ScoreName
from coordinator.placement.vocabulary import CandidateKind, Strategy

GB = 1e9


@dataclass(frozen=True)
class CandidateScore:
    candidate_id: str  # a node id or a pod id
    kind: CandidateKind
    strategy: Strategy
    total: float  # weighted combination, 0..1
    scores: tuple[tuple[ScoreName, float], ...]  # each named score before weighting, 0..1
    free_memory_bytes: int
    predicted_decode_tokens_per_s: float

    def to_dict(self) -> dict:
        return {"id": self.candidate_id, "kind": str(self.kind), "strategy": str(self.strategy),
                "total": round(self.total, 6), "scores": {str(n): round(v, 6) for n, v in self.scores},
                "free_memory_bytes": self.free_memory_bytes,
                "predicted_decode_tokens_per_s": round(self.predicted_decode_tokens_per_s, 3)}


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
    top_candidates: tuple[CandidateScore, ...]  # best first
    chosen_id: str | None
    notes: tuple[str, ...] = ()

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
                         f"{candidate.free_memory_bytes / GB:.1f} GB free")
        lines += [f"note: {note}" for note in self.notes]
        lines.append(f"chosen: {self.chosen_id}" if self.chosen_id else "chosen: none")
        return "\n".join(lines)
