"""A dispatch pass's pool draws a checker as choose_checker does: only an eligible one, one
whenever any is eligible, each eligible one equally likely, and the same reason when none is."""

from __future__ import annotations

import collections
import random

from hypothesis import given
from hypothesis import strategies as st

from coordinator.verification.checker_pool import DRAWS_MAX, CheckerPool, Drawn
from coordinator.verification.peers import (
    Candidate, CheckRequest, NoChecker, Pairing, Party, PeerCheckPolicy, choose_checker, recent_partners,
)

MODEL, DIGEST, OTHER = "test/tiny-llama", "d" * 64, "e" * 64
NOW = 500

_ids = [f"n{i}" for i in range(8)]
_operators = st.sampled_from(["alice", "bob", "carol", "dave"])
_nodes = st.lists(st.tuples(st.sampled_from(_ids), _operators, st.booleans(), st.booleans(), st.booleans()),
                  max_size=8, unique_by=lambda t: t[0])
_pairings = st.lists(st.builds(Pairing, st.sampled_from(_ids), st.sampled_from(_ids), st.integers(0, 600)),
                     max_size=8)


def _eligible_ids(request: CheckRequest, fleet: list[Candidate], pairings: list[Pairing],
                  policy: PeerCheckPolicy) -> set[str]:
    """What choose_checker counts eligible: every candidate it does not name a reason for."""
    found = choose_checker(request, fleet, pairings, policy, random.Random(0), NOW)
    return {c.node_id for c in fleet} - {node_id for node_id, _ in found.rejected}


@given(_nodes, _pairings, st.lists(st.tuples(st.sampled_from(_ids), _operators), min_size=1, max_size=4),
       st.integers(0, 3), st.sampled_from([0, 200, 1_000]), st.integers(0, 2**32))
def test_the_pool_picks_as_choose_checker_would_check_after_check(nodes, pairings, checks, memory,  # type: ignore[no-untyped-def]
                                                                  cooldown_ms, seed) -> None:
    # Several checks in one pass, each pair recorded as made: the pool must track the pairings
    # as choose_checker reads them with each new pair inserted at the front.
    fleet = [Candidate(n, op, ((MODEL, DIGEST if same else OTHER),), online, quarantined)
             for n, op, same, online, quarantined in nodes]
    policy = PeerCheckPolicy(pair_memory_checks=memory, pair_cooldown_ms=cooldown_ms)
    pool, draws = CheckerPool(fleet, pairings, policy, NOW), random.Random(seed)
    pairings = list(pairings)
    for checked, operator in checks:
        request = CheckRequest(MODEL, DIGEST, Party(checked, operator))
        eligible = _eligible_ids(request, fleet, pairings, policy)
        found = pool.choose(request, draws)
        if isinstance(found, NoChecker):
            assert not eligible, "a checker existed and the pool found none"
            expected = choose_checker(request, fleet, pairings, policy, random.Random(0), NOW)
            assert isinstance(expected, NoChecker) and found == expected
            continue
        assert found.node_id in eligible
        assert found.serving == sum(c.serves(MODEL, DIGEST) for c in fleet)
        made = Pairing(checked, found.node_id, NOW)
        pool.record(made)
        pairings.insert(0, made)
        recent = [p for p in pairings if p.at_ms > NOW - cooldown_ms]
        assert all(pool.partners(n) == recent_partners(n, recent, memory) for n in _ids)


def test_a_candidate_whose_own_last_partner_is_the_checked_node_is_not_drawn() -> None:
    # c's last partner was a, though a has checked with b since: c may not check a.
    fleet = [Candidate(n, n, ((MODEL, DIGEST),)) for n in ("a", "b", "c", "d")]
    pairings = [Pairing("a", "b", 30), Pairing("c", "a", 20)]
    pool, draws = CheckerPool(fleet, pairings, PeerCheckPolicy(pair_memory_checks=1), NOW), random.Random(5)
    picked = {pool.choose(CheckRequest(MODEL, DIGEST, Party("a", "a")), draws).node_id for _ in range(50)}  # type: ignore[union-attr]
    assert picked == {"d"}


def test_each_eligible_checker_is_equally_likely_when_few_of_a_large_group_are() -> None:
    # 3 eligible among 60 serving the weights: most checks miss DRAWS_MAX times and filter the
    # group, the rest accept a draw; either way each of the 3 is drawn a third of the time.
    fleet = [Candidate(f"a{i:02}", "alice", ((MODEL, DIGEST),)) for i in range(57)]
    fleet += [Candidate(f"z{i}", f"op{i}", ((MODEL, DIGEST),)) for i in range(3)]
    assert (57 / 60) ** DRAWS_MAX > 0.4  # both ways of drawing are exercised
    pool, draws = CheckerPool(fleet, (), PeerCheckPolicy(pair_memory_checks=0), NOW), random.Random(11)
    request = CheckRequest(MODEL, DIGEST, Party("a00", "alice"))
    counts = collections.Counter(pool.choose(request, draws).node_id for _ in range(3_000))  # type: ignore[union-attr]
    assert set(counts) == {"z0", "z1", "z2"}
    assert all(900 <= n <= 1_100 for n in counts.values()), counts


def test_no_checker_is_explained_with_every_reason_counted() -> None:
    fleet = [Candidate("a", "alice", ((MODEL, DIGEST),)), Candidate("a2", "alice", ((MODEL, DIGEST),)),
             Candidate("b", "bob", ((MODEL, OTHER),)), Candidate("c", "carol", ((MODEL, DIGEST),), online=False)]
    found = CheckerPool(fleet, (), PeerCheckPolicy(), NOW).choose(CheckRequest(MODEL, DIGEST, Party("a", "alice")),
                                                                  random.Random(0))
    assert isinstance(found, NoChecker)
    assert "1 offline, 1 other weights, 1 same operator, 1 the checked node" in found.reason


def test_a_pair_just_made_is_not_made_again_in_the_same_pass() -> None:
    fleet = [Candidate(n, n, ((MODEL, DIGEST),)) for n in ("a", "b", "c")]
    pool = CheckerPool(fleet, (), PeerCheckPolicy(pair_memory_checks=1, pair_cooldown_ms=1_000), NOW)
    first = pool.choose(CheckRequest(MODEL, DIGEST, Party("a", "a")), random.Random(0))
    assert isinstance(first, Drawn)
    pool.record(Pairing("a", first.node_id, NOW))
    again = pool.choose(CheckRequest(MODEL, DIGEST, Party("a", "a")), random.Random(0))
    assert isinstance(again, Drawn) and again.node_id not in ("a", first.node_id)
