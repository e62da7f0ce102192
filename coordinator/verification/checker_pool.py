"""One dispatch pass's would-be checkers, drawn from without filtering the fleet for each check. Pure.

peers.choose_checker names every node's reason, for every check: O(fleet) per check, 7% of the
coordinator's CPU per job at 1,000 Macs. The pool groups the candidates by the weights they
serve, once per pass, and draws from the job's group until a node passes the same filters
(rejection sampling: every eligible node is equally likely, as in choose_checker). After
DRAWS_MAX misses it filters the group and draws among the eligible, which is just as uniform;
only when none is eligible does it explain, with choose_checker's reasons and counts.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from coordinator.verification.peers import (
    Candidate, CheckRequest, Chosen, NoChecker, Pairing, PeerCheckPolicy, choose_checker, partners_among,
    rejection,
)

DRAWS_MAX = 16  # draws from the group before filtering it: 16 misses in a row means few are eligible


@dataclass(frozen=True)
class Drawn:
    node_id: str
    operator_id: str
    serving: int  # nodes serving the job's weights it was drawn from (each eligible one equally likely)


class CheckerPool:
    """Candidates by (model id, weights digest), each group in node id order, and the pass's
    pairings by node; record() adds a pair the pass just made, as choose_checker's caller did."""

    def __init__(self, candidates: Sequence[Candidate], pairings: Iterable[Pairing], policy: PeerCheckPolicy,
                 now_ms: int) -> None:
        self._candidates = sorted(candidates, key=lambda c: c.node_id)  # a stable order for the draw
        self._groups: dict[tuple[str, str], list[Candidate]] = {}
        for candidate in self._candidates:
            for served in dict.fromkeys(candidate.models):
                self._groups.setdefault(served, []).append(candidate)
        self._policy, self._now_ms = policy, now_ms
        self._pairings: list[Pairing] = []  # within the cooldown, in the order given (newest first)
        self._own: dict[str, list[Pairing]] = {}  # by node, newest first; ties keep the order given
        self._partners: dict[str, frozenset[str]] = {}  # memo of partners(), dropped when a pair is recorded
        for pairing in pairings:
            if self._recent(pairing):
                self._pairings.append(pairing)
                for node_id in dict.fromkeys((pairing.checked_node_id, pairing.checker_node_id)):
                    self._own.setdefault(node_id, []).append(pairing)
        for own in self._own.values():
            own.sort(key=lambda p: p.at_ms, reverse=True)

    def _recent(self, pairing: Pairing) -> bool:
        return pairing.at_ms > self._now_ms - self._policy.pair_cooldown_ms

    def record(self, pairing: Pairing) -> None:
        """A pair just made: remembered first among equal times, as choose_checker reads a list
        with it inserted at the front."""
        if not self._recent(pairing):
            return
        self._pairings.insert(0, pairing)
        for node_id in dict.fromkeys((pairing.checked_node_id, pairing.checker_node_id)):
            own = self._own.setdefault(node_id, [])
            own.insert(0, pairing)
            own.sort(key=lambda p: p.at_ms, reverse=True)  # stable: it stays first among its equals
            self._partners.pop(node_id, None)

    def partners(self, node_id: str) -> frozenset[str]:
        """peers.recent_partners over the pass's pairings within the cooldown."""
        if node_id not in self._partners:
            self._partners[node_id] = partners_among(node_id, self._own.get(node_id, []),
                                                     self._policy.pair_memory_checks)
        return self._partners[node_id]

    def eligible(self, candidate: Candidate, request: CheckRequest) -> bool:
        """choose_checker's filters: rejection(), and the candidate's own recent partners."""
        checked_id = request.checked.node_id
        return (rejection(candidate, request, self.partners(checked_id)) is None
                and checked_id not in self.partners(candidate.node_id))

    def choose(self, request: CheckRequest, draws: random.Random) -> Drawn | NoChecker:
        """A checker drawn at random among the eligible, or choose_checker's explanation of why none is."""
        group = self._groups.get((request.model_id, request.weights_digest), [])
        for _ in range(DRAWS_MAX if group else 0):
            candidate = group[draws.randrange(len(group))]
            if self.eligible(candidate, request):
                return Drawn(candidate.node_id, candidate.operator_id, len(group))
        eligible = [candidate for candidate in group if self.eligible(candidate, request)]
        if eligible:
            chosen = eligible[draws.randrange(len(eligible))]
            return Drawn(chosen.node_id, chosen.operator_id, len(group))
        found = choose_checker(request, self._candidates, self._pairings, self._policy, draws, self._now_ms)
        assert not isinstance(found, Chosen), "the pool and choose_checker filter alike"
        return found
