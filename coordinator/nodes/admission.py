"""How fast strangers may join: token buckets per source address and per operator.

A Sybil burst (issue 25: 1,000 registrations from one client in 22 s, nothing limited)
meets a bucket that refills at a steady rate after a burst. RegisterChallenge spends
the address's bucket, so no registration comes without it; Register spends the proven
operator's. The limits live in coordinator.config.RegistrationLimits, nowhere else.
"""

from __future__ import annotations

import collections
import threading


class TokenBuckets:
    """One bucket per key: `burst` tokens, refilled at `per_minute`; bounded in number."""

    def __init__(self, burst: int, per_minute: int, buckets_max: int) -> None:
        self._burst, self._per_minute, self._buckets_max = burst, per_minute, buckets_max
        # key -> (tokens in thousandths, last refill ms): integers, so no drift
        self._buckets: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str, now_ms: int) -> bool:
        """Spend one token of key's bucket; False when it is empty."""
        with self._lock:
            milli, last_ms = self._buckets.pop(key, (self._burst * 1000, now_ms))
            refill = max(0, now_ms - last_ms) * self._per_minute // 60
            milli = min(self._burst * 1000, milli + refill)
            allowed = milli >= 1000
            self._buckets[key] = (milli - 1000 if allowed else milli, now_ms)
            while len(self._buckets) > self._buckets_max:
                self._buckets.popitem(last=False)
            return allowed

    def seconds_until_next(self, key: str, now_ms: int) -> int:
        with self._lock:
            milli, last_ms = self._buckets.get(key, (self._burst * 1000, now_ms))
        missing = max(0, 1000 - milli - max(0, now_ms - last_ms) * self._per_minute // 60)
        return -(-missing * 60 // (self._per_minute * 1000))


def address_of_peer(peer: str) -> str:
    """gRPC's peer ("ipv4:1.2.3.4:5678", "ipv6:[::1]:5678", "unix:...") without its port."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1:rest.find("]")] if "]" in rest else rest
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    return peer
