"""Network totals, pure: what the header of MLX World shows, and its recent history.

"Largest model the network can run now" is an estimate from free memory alone:
the most any one Mac or pod can still lend, less a reserve for the KV cache and
runtime, at 4.5 bits per weight (4-bit weights with their group scales).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from ledger.api import format_mlx

RATE_WINDOW_MS = 60_000  # jobs per minute and tokens per second are over the last minute
KV_AND_RUNTIME_RESERVE_BPS = 1_500  # 15% of free memory is kept for KV cache and overhead
BITS_PER_WEIGHT_4BIT = 4.5
HISTORY_SAMPLES_MAX = 360  # at the default 10 s interval: one hour of chart
HISTORY_INTERVAL_MS_DEFAULT = 10_000


def params_at_4bit(free_bytes: int) -> int:
    """Parameters of the largest 4-bit model that fits in free_bytes after the reserve."""
    assert free_bytes >= 0
    usable_bits = free_bytes * (10_000 - KV_AND_RUNTIME_RESERVE_BPS) // 10_000 * 8
    return int(usable_bits // BITS_PER_WEIGHT_4BIT)


@dataclass(frozen=True)
class Candidate:
    """A Mac or a pod that could take a job now, with the memory it can still lend."""

    label: str  # display name of the Mac, or "pod <id>"
    kind: str  # "mac" or "pod"
    free_bytes: int


def largest_candidate(candidates: Iterable[Candidate]) -> Candidate | None:
    """The Mac or pod with the most free memory; ties go to the first label, for stable output."""
    best: Candidate | None = None
    for candidate in candidates:
        if best is None or (candidate.free_bytes, best.label) > (best.free_bytes, candidate.label):
            best = candidate
    return best


@dataclass(frozen=True)
class Totals:
    at_ms: int
    macs_total: int
    macs_online: int  # online or busy
    macs_busy: int
    pods_online: int
    memory_lendable_bytes: int  # summed over online Macs accepting jobs
    largest: Candidate | None
    jobs_last_minute: int
    tokens_last_minute: int
    operator_paid_base_units: int  # posted operator credits, all time
    operator_held_base_units: int  # credits held pending their check

    def __post_init__(self) -> None:
        assert 0 <= self.macs_busy <= self.macs_online <= self.macs_total
        assert self.operator_paid_base_units >= 0 and self.operator_held_base_units >= 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_last_minute * 1000 / RATE_WINDOW_MS

    def to_json(self) -> dict[str, object]:
        largest = self.largest
        return {
            "at_ms": self.at_ms,
            "macs_total": self.macs_total,
            "macs_online": self.macs_online,
            "macs_busy": self.macs_busy,
            "pods_online": self.pods_online,
            "memory_lendable_bytes": self.memory_lendable_bytes,
            "largest_model": None if largest is None else {
                "where": largest.label, "kind": largest.kind, "free_bytes": largest.free_bytes,
                "params_4bit": params_at_4bit(largest.free_bytes)},
            "jobs_per_minute": self.jobs_last_minute * 60_000 // RATE_WINDOW_MS,
            "tokens_per_s": round(self.tokens_per_s, 2),
            # Strings: base-unit totals can pass 2**53, where JavaScript numbers lose digits.
            "mlx_paid_base_units": str(self.operator_paid_base_units),
            "mlx_paid": format_mlx(self.operator_paid_base_units),
            "mlx_held_base_units": str(self.operator_held_base_units),
            "mlx_held": format_mlx(self.operator_held_base_units),
        }


@dataclass(frozen=True)
class Sample:
    """One point of the small charts."""

    at_ms: int
    macs_online: int
    memory_lendable_bytes: int
    jobs_per_minute: int
    tokens_per_s: float
    mlx_paid_base_units: int


def sample_of(totals: Totals) -> Sample:
    return Sample(totals.at_ms, totals.macs_online, totals.memory_lendable_bytes,
                  totals.jobs_last_minute * 60_000 // RATE_WINDOW_MS, round(totals.tokens_per_s, 2),
                  totals.operator_paid_base_units)


class TotalsHistory:
    """The last HISTORY_SAMPLES_MAX samples, at most one per interval; thread-safe.

    Kept in memory: after a restart the charts start again (the totals themselves
    come from the database and survive).
    """

    def __init__(self, interval_ms: int = HISTORY_INTERVAL_MS_DEFAULT,
                 samples_max: int = HISTORY_SAMPLES_MAX) -> None:
        assert interval_ms > 0 and 0 < samples_max <= 100_000
        self.interval_ms = interval_ms
        self._samples: collections.deque[Sample] = collections.deque(maxlen=samples_max)
        self._lock = threading.Lock()

    def offer(self, totals: Totals) -> bool:
        """Keep the sample if an interval has passed since the last one kept."""
        with self._lock:
            if self._samples and totals.at_ms - self._samples[-1].at_ms < self.interval_ms:
                return False
            self._samples.append(sample_of(totals))
            return True

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def to_json(self) -> dict[str, object]:
        samples = self.samples()
        series = {name: [getattr(s, name) for s in samples]
                  for name in ("macs_online", "memory_lendable_bytes", "jobs_per_minute", "tokens_per_s")}
        series["mlx_paid_base_units"] = [str(s.mlx_paid_base_units) for s in samples]
        return {"interval_ms": self.interval_ms, "at_ms": [s.at_ms for s in samples], "series": series}

