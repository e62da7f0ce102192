"""Choosing a peer to check a job: never itself, never its operator, never a recent partner."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from coordinator.verification.economics import StakePolicy
from coordinator.verification.peers import (
    Candidate, CheckRequest, Chosen, NoChecker, Pairing, Party, PeerCheckPolicy, Role, Ruling,
    check_fee, choose_checker, fee_is_earned, job_passes, partners_by_node, recent_partners, ruling,
    still_no_checker,
)
from ledger.api import network_fee_floor, price_job

MODEL, DIGEST = "test/tiny-llama", "d" * 64
POLICY = PeerCheckPolicy(pair_memory_checks=1, pair_cooldown_ms=1_000)
NOW = 500  # every pairing in these tests is within the cooldown


def _node(node_id: str, operator: str, digest: str = DIGEST, **flags: bool) -> Candidate:
    return Candidate(node_id, operator, ((MODEL, digest),), **flags)


def _request(node_id: str = "a", operator: str = "alice", **fields) -> CheckRequest:  # type: ignore[no-untyped-def]
    return CheckRequest(MODEL, DIGEST, Party(node_id, operator), **fields)


def test_the_checker_is_of_another_operator_and_serves_the_same_weights() -> None:
    fleet = [_node("a", "alice"), _node("a2", "alice"), _node("b", "bob", digest="e" * 64),
             _node("c", "carol"), _node("d", "dave", quarantined=True), _node("e", "erin", online=False)]
    chosen = choose_checker(_request(), fleet, (), POLICY, random.Random(1), NOW)
    assert isinstance(chosen, Chosen)
    assert (chosen.node_id, chosen.eligible) == ("c", 1)
    assert dict(chosen.rejected) == {"a": "the checked node", "a2": "same operator",
                                     "b": "other weights", "d": "quarantined", "e": "offline"}


def test_no_eligible_peer_says_why_and_keeps_the_credit_held() -> None:
    found = choose_checker(_request(), [_node("a", "alice"), _node("a2", "alice")], (), POLICY,
                           random.Random(1), NOW)
    assert isinstance(found, NoChecker)
    assert "1 same operator" in found.reason and "1 the checked node" in found.reason
    assert "held" in found.reason


def test_a_check_among_its_own_operators_nodes_is_known_to_find_no_checker_again() -> None:
    own = [_node("a", "alice"), _node("a2", "alice", online=False)]
    found = choose_checker(_request(), own, (), POLICY, random.Random(1), NOW)
    assert isinstance(found, NoChecker)
    assert still_no_checker(Party("a", "alice"), own, found.reason)
    assert not still_no_checker(Party("a", "alice"), own, None)  # never looked: the pass must look
    assert not still_no_checker(Party("a", "alice"), own, "waiting for a peer")
    # The fleet changed since: one node more of the operator, or one of another operator.
    assert not still_no_checker(Party("a", "alice"), [*own, _node("a3", "alice")], found.reason)
    assert not still_no_checker(Party("a", "alice"), [*own, _node("b", "bob", online=False)], found.reason)


def test_a_recent_partner_is_not_paired_again_in_either_direction() -> None:
    fleet = [_node("a", "alice"), _node("b", "bob"), _node("c", "carol")]
    checked_by_b = [Pairing("a", "b", 10)]
    assert choose_checker(_request(), fleet, checked_by_b, POLICY, random.Random(0), NOW).node_id == "c"  # type: ignore[union-attr]
    a_checked_b = [Pairing("b", "a", 10)]  # reciprocal pairs rotate too
    assert choose_checker(_request(), fleet, a_checked_b, POLICY, random.Random(0), NOW).node_id == "c"  # type: ignore[union-attr]
    # c's own last partner was a: a pairing from c's side counts as well
    c_last = [Pairing("c", "a", 20), Pairing("a", "b", 5)]
    found = choose_checker(_request(), fleet, c_last, PeerCheckPolicy(pair_memory_checks=1),
                           random.Random(0), NOW)
    assert isinstance(found, NoChecker) and "2 recently paired" in found.reason


def test_a_pair_may_repeat_once_its_cooldown_has_passed() -> None:
    """With one other operator, the check waits out the cooldown, then the pair repeats."""
    fleet = [_node("a", "alice"), _node("b", "bob")]
    pairings = [Pairing("a", "b", 100)]
    waiting = choose_checker(_request(), fleet, pairings, POLICY, random.Random(0), 99 + POLICY.pair_cooldown_ms)
    assert isinstance(waiting, NoChecker) and "1 recently paired" in waiting.reason
    later = choose_checker(_request(), fleet, pairings, POLICY, random.Random(0), 100 + POLICY.pair_cooldown_ms)
    assert isinstance(later, Chosen) and later.node_id == "b"


def test_recent_partners_remember_only_the_last_checks() -> None:
    pairings = [Pairing("a", "b", 1), Pairing("c", "a", 2), Pairing("a", "d", 3), Pairing("x", "y", 4)]
    assert recent_partners("a", pairings, 1) == {"d"}
    assert recent_partners("a", pairings, 2) == {"d", "c"}
    assert recent_partners("a", pairings, 0) == frozenset()


@given(st.lists(st.builds(Pairing, st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["a", "b", "c", "d"]),
                          st.integers(0, 5)), max_size=12), st.integers(0, 4))
def test_partners_by_node_is_recent_partners_of_every_node(pairings, memory) -> None:  # type: ignore[no-untyped-def]
    # Few nodes and instants: self-pairings, repeated pairs and tied times (ties keep the order) all occur.
    index = partners_by_node(pairings, memory)
    for node_id in ("a", "b", "c", "d", "absent"):
        assert index.get(node_id, frozenset()) == recent_partners(node_id, pairings, memory)
    assert set(index) == {n for p in pairings for n in (p.checked_node_id, p.checker_node_id)}


def test_a_referee_is_of_a_third_operator_and_never_a_party() -> None:
    fleet = [_node("a", "alice"), _node("b", "bob"), _node("b2", "bob"), _node("c", "carol")]
    request = _request(parties=(Party("b", "bob"),))
    chosen = choose_checker(request, fleet, (), PeerCheckPolicy(pair_memory_checks=0), random.Random(3), NOW)
    assert isinstance(chosen, Chosen) and chosen.node_id == "c"
    assert dict(chosen.rejected)["b"] == "a party to the dispute"
    assert dict(chosen.rejected)["b2"] == "same operator"


def test_a_checker_that_let_its_check_lapse_is_not_asked_again() -> None:
    fleet = [_node("a", "alice"), _node("b", "bob"), _node("c", "carol")]
    chosen = choose_checker(_request(already_asked=frozenset({"b"})), fleet, (), POLICY, random.Random(0), NOW)
    assert isinstance(chosen, Chosen) and chosen.node_id == "c"


def test_the_draw_spreads_checks_over_every_eligible_peer() -> None:
    fleet = [_node("a", "alice"), *(_node(f"n{i}", f"op{i}") for i in range(5))]
    draws = random.Random(7)
    picked = {choose_checker(_request(), fleet, (), POLICY, draws, NOW).node_id for _ in range(200)}  # type: ignore[union-attr]
    assert picked == {f"n{i}" for i in range(5)}


_operators = st.sampled_from(["alice", "bob", "carol", "dave"])
_nodes = st.lists(st.tuples(st.sampled_from([f"n{i}" for i in range(8)]), _operators,
                            st.booleans(), st.booleans(), st.booleans()),
                  max_size=8, unique_by=lambda t: t[0])
_pairings = st.lists(st.builds(Pairing, st.sampled_from([f"n{i}" for i in range(8)]),
                               st.sampled_from([f"n{i}" for i in range(8)]), st.integers(0, 100)),
                     max_size=6)


@given(_nodes, _pairings, st.sampled_from([f"n{i}" for i in range(8)]), _operators,
       st.integers(0, 3), st.integers(0, 2**32))
def test_never_self_never_same_operator_never_a_recent_partner(nodes, pairings, checked, operator,  # type: ignore[no-untyped-def]
                                                               memory, seed) -> None:
    fleet = [Candidate(n, op, ((MODEL, DIGEST if same else "e" * 64),), online, quarantined)
             for n, op, same, online, quarantined in nodes]
    policy = PeerCheckPolicy(pair_memory_checks=memory, pair_cooldown_ms=1_000)
    found = choose_checker(_request(checked, operator), fleet, pairings, policy, random.Random(seed), NOW)
    by_id = {c.node_id: c for c in fleet}
    if isinstance(found, NoChecker):
        assert all(reason for _, reason in found.rejected)
        return
    chosen = by_id[found.node_id]
    assert chosen.node_id != checked
    assert chosen.operator_id != operator
    assert chosen.serves(MODEL, DIGEST) and chosen.online and not chosen.quarantined
    assert chosen.node_id not in recent_partners(checked, pairings, memory)
    assert checked not in recent_partners(chosen.node_id, pairings, memory)


def test_a_dispute_is_decided_by_the_referee() -> None:
    assert ruling(True, None) is Ruling.AGREED
    assert ruling(False, None) is None  # a referee is needed
    assert ruling(False, False) is Ruling.CHECKED_LOSES
    assert ruling(False, True) is Ruling.CHECKER_LOSES
    assert not job_passes(Ruling.CHECKED_LOSES)
    assert job_passes(Ruling.CHECKER_LOSES) and job_passes(Ruling.AGREED)


def test_a_lying_checker_is_not_paid_and_a_referee_always_is() -> None:
    assert not fee_is_earned(Role.CHECK, Ruling.CHECKER_LOSES)
    assert fee_is_earned(Role.CHECK, Ruling.CHECKED_LOSES) and fee_is_earned(Role.CHECK, Ruling.AGREED)
    assert all(fee_is_earned(Role.REFEREE, r) for r in Ruling)


@given(st.integers(0, 10**15), st.floats(0.01, 1.0), st.floats(0.01, 1.0), st.floats(1.25, 3.0))  # economics: >= margin
def test_the_fee_is_an_integer_share_never_above_the_credit(credit: int, cost: float, planted: float,
                                                            margin: float) -> None:
    policy = StakePolicy(check_cost_share=cost, planted_share_min=planted, fee_margin=margin,
                         planted_per_check_max=max(planted, StakePolicy().planted_per_check_max))
    fee = check_fee(credit, policy)
    assert isinstance(fee, int) and 0 <= fee <= network_fee_floor(credit) <= credit
    assert (fee == 0) == (network_fee_floor(credit) == 0)


@given(st.integers(0, 10**15), st.integers(0, 10**7), st.integers(0, 10**7))
def test_the_fee_never_exceeds_the_network_fee_the_job_paid(charge_scale: int, prompt: int, completion: int) -> None:
    """For any job priced by the earning policy: its check fee fits inside its own network fee."""
    for parameters in (10**9, 7 * 10**9, 70 * 10**9, 10**12):
        price = price_job(parameters, prompt, completion)
        assert check_fee(price.operator_credit, StakePolicy()) <= price.network_fee
        credit = charge_scale * 8_500 // 10_000
        assert network_fee_floor(credit) <= charge_scale - credit
