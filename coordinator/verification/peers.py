"""Checks by peers: who checks a job, who referees a dispute, what a check pays. Pure.

A sampled job's replay goes to another node that serves the same weights (by digest). The
checker is drawn at random among the eligible nodes; every filter names its reason, so an
operator can read why a node was or was not asked:

    the checked node       a node never checks itself
    same operator          an operator never checks its own nodes (nor referees them)
    other weights          the checker must hold the very weights the job names
    quarantined, offline   only nodes in good standing that are online now
    recently paired        the pair took part in one of either node's last
                           `pair_memory_checks` peer checks, within `pair_cooldown_ms`: a
                           repeated pairing is how two operators would collude, so the pairs
                           rotate; where no other partner exists, the check waits out the
                           cooldown (its credit held) rather than repeat a pair at once
    already asked          a checker that let its check lapse, or a party to a dispute

A dispute (the checker's replay does not match the checked node's proof) goes to a referee
of a third operator, or to the coordinator's own verifier where it holds the model. The
referee's verdict stands: the side it contradicts loses trust, so a lying checker is caught
the same way as a cheating node. A checker that answers "matches" without replaying is caught
by planted checks (planted.py); its fee and the planting rate come from the stake policy
(economics.py).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from coordinator.verification.economics import BASIS_POINTS, StakePolicy, checker_fee_bps
from ledger.api import network_fee_floor


@dataclass(frozen=True)
class PeerCheckPolicy:
    # Off: a sampled job no coordinator verifier holds is left unchecked, as before peer checks.
    enabled: bool = True
    pair_memory_checks: int = 1  # a node's last peer checks whose partners are not paired again ...
    pair_cooldown_ms: int = 600_000  # ... within this long
    deadline_ms: int = 120_000  # a check job not answered by then goes to another checker
    attempts_max: int = 4  # checkers asked per role before the check is left held, with the reason
    # The checker's fee and the planted checks are set by the stake policy (economics.py).

    def __post_init__(self) -> None:
        assert self.pair_memory_checks >= 0 and self.pair_cooldown_ms >= 0
        assert self.deadline_ms > 0 and self.attempts_max >= 1


DEFAULT_PEER_CHECK_POLICY = PeerCheckPolicy()


class Role(StrEnum):
    CHECK = "check"  # the first replay by a peer
    REFEREE = "referee"  # a third replay that settles a dispute


@dataclass(frozen=True)
class Party:
    node_id: str
    operator_id: str


@dataclass(frozen=True)
class Candidate:
    """A node that might check: what the filters need to know of it."""

    node_id: str
    operator_id: str
    models: tuple[tuple[str, str], ...]  # (model id, weights digest) it serves
    online: bool = True
    quarantined: bool = False

    def serves(self, model_id: str, weights_digest: str) -> bool:
        return (model_id, weights_digest) in self.models


@dataclass(frozen=True)
class CheckRequest:
    """The job to check and who must not check it."""

    model_id: str
    weights_digest: str
    checked: Party
    parties: tuple[Party, ...] = ()  # others whose node and operator are excluded (a dispute's checker)
    already_asked: frozenset[str] = frozenset()  # nodes that let a check of this job lapse


@dataclass(frozen=True)
class Pairing:
    """One past peer check: who was checked, who checked, when."""

    checked_node_id: str
    checker_node_id: str
    at_ms: int


@dataclass(frozen=True)
class Chosen:
    node_id: str
    operator_id: str
    eligible: int  # how many it was drawn among
    rejected: tuple[tuple[str, str], ...]  # (node id, reason) of every node left out


@dataclass(frozen=True)
class NoChecker:
    reason: str
    rejected: tuple[tuple[str, str], ...]


def recent_partners(node_id: str, pairings: Iterable[Pairing], memory: int) -> frozenset[str]:
    """The partners of node_id in its last `memory` peer checks (as checked or as checker)."""
    own = [p for p in pairings if node_id in (p.checked_node_id, p.checker_node_id)]
    return partners_among(node_id, own, memory)


def partners_among(node_id: str, own: list[Pairing], memory: int) -> frozenset[str]:
    """node_id's partners in the newest `memory` of its own pairings (sorted here, in place)."""
    own.sort(key=lambda p: p.at_ms, reverse=True)  # stable: ties keep the pairings' order
    return frozenset(p.checker_node_id if p.checked_node_id == node_id else p.checked_node_id
                     for p in own[:memory])


def partners_by_node(pairings: Iterable[Pairing], memory: int) -> dict[str, frozenset[str]]:
    """recent_partners of every node in the pairings, in one pass over them (a node absent has
    none): choosing among N candidates read the pairings N times."""
    own: dict[str, list[Pairing]] = {}
    for pairing in pairings:
        own.setdefault(pairing.checked_node_id, []).append(pairing)
        if pairing.checker_node_id != pairing.checked_node_id:
            own.setdefault(pairing.checker_node_id, []).append(pairing)
    return {node_id: partners_among(node_id, found, memory) for node_id, found in own.items()}


def rejection(candidate: Candidate, request: CheckRequest, paired: frozenset[str]) -> str | None:
    """Why this node may not check the job, or None when it may."""
    everyone = (request.checked, *request.parties)
    if any(candidate.node_id == party.node_id for party in everyone):
        return "the checked node" if candidate.node_id == request.checked.node_id else "a party to the dispute"
    if any(candidate.operator_id == party.operator_id for party in everyone):
        return "same operator"
    if not candidate.serves(request.model_id, request.weights_digest):
        return "other weights"
    if candidate.quarantined:
        return "quarantined"
    if not candidate.online:
        return "offline"
    if candidate.node_id in request.already_asked:
        return "already asked"
    if candidate.node_id in paired:
        return "recently paired"
    return None


def choose_checker(request: CheckRequest, candidates: Sequence[Candidate], pairings: Iterable[Pairing],
                   policy: PeerCheckPolicy, draws: random.Random, now_ms: int) -> Chosen | NoChecker:
    """A checker drawn at random among the eligible nodes (draws: the coordinator's own randomness).
    Every node's reason is named, at O(fleet) per check: dispatch draws through checker_pool,
    which filters alike and explains with this when no node is eligible."""
    pairings = tuple(p for p in pairings if p.at_ms > now_ms - policy.pair_cooldown_ms)
    checked_id = request.checked.node_id
    memory = policy.pair_memory_checks
    # A checked node's recent partners, and any candidate whose own recent partners include it.
    partners = partners_by_node(pairings, memory) if memory else {}
    paired = partners.get(checked_id, frozenset())
    eligible: list[Candidate] = []
    rejected: list[tuple[str, str]] = []
    for candidate in sorted(candidates, key=lambda c: c.node_id):  # a stable order for the draw
        reason = rejection(candidate, request, paired)
        if reason is None and checked_id in partners.get(candidate.node_id, frozenset()):
            reason = "recently paired"
        if reason is None:
            eligible.append(candidate)
        else:
            rejected.append((candidate.node_id, reason))
    if not eligible:
        return NoChecker(_no_checker_reason(request, rejected), tuple(rejected))
    chosen = eligible[draws.randrange(len(eligible))]
    return Chosen(chosen.node_id, chosen.operator_id, len(eligible), tuple(rejected))


def _no_checker_reason(request: CheckRequest, rejected: list[tuple[str, str]]) -> str:
    return f"no peer can check {request.model_id} now ({_told(rejected)}); the credit stays held"


def _told(rejected: Iterable[tuple[str, str]]) -> str:
    counts: dict[str, int] = {}
    for _, reason in rejected:
        counts[reason] = counts.get(reason, 0) + 1
    return ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items())) or "no other nodes"


def still_no_checker(checked: Party, candidates: Sequence[Candidate], reason: str | None) -> bool:
    """Whether a check (no dispute parties) that last found no checker, for `reason`, would find
    none again for the same reason: every candidate is the checked node or of its operator, which
    no receipt, pairing or clock changes. Then the pass need not read the job again."""
    rejected: list[tuple[str, str]] = []
    for candidate in candidates:
        if candidate.node_id == checked.node_id:
            rejected.append((candidate.node_id, "the checked node"))
        elif candidate.operator_id == checked.operator_id:
            rejected.append((candidate.node_id, "same operator"))
        else:
            return False
    return (reason is not None and reason.startswith("no peer can check ")
            and reason.endswith(f" now ({_told(rejected)}); the credit stays held"))


# --- disputes -------------------------------------------------------------------

class Ruling(StrEnum):
    AGREED = "agreed"  # the checker's replay matched the proof: the job passes
    CHECKED_LOSES = "checked_loses"  # the referee confirms the checker: the job fails
    CHECKER_LOSES = "checker_loses"  # the referee contradicts the checker: the job passes, the checker lied


def ruling(checker_passed: bool, referee_passed: bool | None) -> Ruling | None:
    """What a check and (for a dispute) its referee decide; None while a referee is still needed."""
    if checker_passed:
        return Ruling.AGREED
    if referee_passed is None:
        return None
    return Ruling.CHECKER_LOSES if referee_passed else Ruling.CHECKED_LOSES


def job_passes(decided: Ruling) -> bool:
    return decided is not Ruling.CHECKED_LOSES


# --- fees -----------------------------------------------------------------------

def check_fee(operator_credit: int, policy: StakePolicy) -> int:
    """Base units a checker earns for one replay: the share of the checked job's credit the stake
    policy sets (economics.checker_fee_bps), at least one unit when the job earned anything, and
    never more than the job's network fee, which it is paid from (ledger network_fee_floor)."""
    assert operator_credit >= 0
    bps = checker_fee_bps(policy)
    if operator_credit == 0 or bps == 0:
        return 0
    return min(network_fee_floor(operator_credit), max(1, operator_credit * bps // BASIS_POINTS))


def fee_is_earned(role: Role, decided: Ruling) -> bool:
    """A referee is paid for its ruling; a checker only when its answer stands."""
    return role is Role.REFEREE or decided is not Ruling.CHECKER_LOSES
