"""Searching the index: filter by group, then score only the best few by bound.

Within a group every candidate shares a speed, and keys are sorted by free memory,
so the best fit comes first and each later candidate's best-fit score only falls.
A candidate's score is at most  w_fit x fit + w_speed x speed + the group's highest
static score; once that bound drops below the lowest score still worth finding,
the rest cannot win. Groups are visited best bound first, and runs of identical
candidates (same free memory and static score) are scored once and tie-broken by
the job's seed. A decision does little per group: where the job starts to fit comes
from the index (kept current for recent job sizes), and a group's exact bound is
computed only when its perfect-fit bound could still lead. Scan limits (config) cap the work on pathological groups; with the
defaults the benchmark's choices match the exhaustive search.

Groups are not split by static score band: on the benchmark's loaded fleet most jobs' speed
scores saturate, so bands of many classes tie near the top and each needs its exact bound.
Bands 1/16 wide cost 367k instructions per Mac search against 326k (1/256: 129 groups bounded
per decision against 16), and the digest's decisions changed at 1/256.
"""

from __future__ import annotations

import math
from typing import Any, Final, NamedTuple

from coordinator.placement.config import PlacementConfig
from coordinator.placement.filters import FilterReason
from coordinator.placement.index import (
    FREE_SHIFT, MAX_POSITIONS, POSITION_MASK, STATIC_SHIFT, TAIL_MASK, FleetIndex, Group, MacClass, ModelEntry,
)
from coordinator.placement.natives import bisect_left, bisect_right, heappop, heappush, log2
from coordinator.placement.scored import Scored
from coordinator.placement.scoring import STATIC_SCORE_SCALE
from coordinator.placement.terms import JobTerms
from coordinator.placement.vocabulary import Strategy


class SearchResult(NamedTuple):
    """What one search found: counts by filter reason, and the best few."""

    filtered: dict[FilterReason, int]
    feasible: int
    scored: int
    top: tuple[Scored, ...]  # best first; top[0] is the choice, tie already broken


class Best:
    """Running best score with its ties, and the top few for the explanation.

    Candidates are offered as plain tuples in Scored's field order (cheap to make in the
    scan loop); only the few that end up in the result become Scored. `floor` is the
    lowest score still worth finding: the last of a full top list. Pruning against it
    (not the best) keeps the explanation's runners-up exact too.
    """

    __slots__ = ("score", "ties", "top", "top_max", "floor")

    def __init__(self, top_max: int) -> None:
        self.score = -1.0
        self.ties: list[tuple[Any, tuple]] = []  # (where to find the tie, what was scored)
        self.top: list[tuple] = []
        self.top_max = top_max
        self.floor = -1.0

    def offer(self, tie: object, scored: tuple) -> None:
        # The tuple's items are read into typed locals: compiled, the comparisons are then on
        # doubles and machine ints, not generic object comparisons.
        total: float = scored[0]
        if total > self.score:
            self.score, self.ties = total, [(tie, scored)]
        elif total == self.score:
            self.ties.append((tie, scored))
        self.offer_for_top(scored)

    def offer_for_top(self, scored: tuple) -> None:
        """The top list is ordered by score, then position, whatever order candidates arrive in."""
        top = self.top
        total: float = scored[0]
        position: int = scored[1]
        if len(top) == self.top_max:
            last = top[-1]
            last_total: float = last[0]
            if total < last_total:
                return
            if total == last_total:
                last_position: int = last[1]
                if position >= last_position:
                    return
            top.pop()
        # As insort by (-score, position), without a key call per comparison: the list is a few long.
        i = len(top)
        while i:
            above = top[i - 1]
            above_total: float = above[0]
            if above_total > total:
                break
            if above_total == total:
                above_position: int = above[1]
                if above_position <= position:
                    break
            i -= 1
        top.insert(i, scored)
        if len(top) == self.top_max:
            floor: float = top[-1][0]
            self.floor = floor

    def result(self, filtered: dict[FilterReason, int], feasible: int, scored: int,
               chosen: tuple | None) -> SearchResult:
        if chosen is None:
            return SearchResult(filtered, feasible, scored, ())
        others = [s for s in self.top if s[1] != chosen[1]][: self.top_max - 1]
        return SearchResult(filtered, feasible, scored, tuple(Scored(*s) for s in (chosen, *others)))


def search_prologue(models: dict[str, ModelEntry], candidates: int, terms: JobTerms,
                    config: PlacementConfig) -> tuple[ModelEntry | None, dict[FilterReason, int], Best]:
    """What the Mac and pod searches both start with: the model's entry (None when no candidate
    serves it), the counts of those that cannot take a job now by reason, and an empty best list."""
    entry = models.get(terms.job.model.model_id)
    filtered = {FilterReason.MODEL_NOT_SERVED: candidates - (entry.served if entry else 0)}
    if entry is not None:
        filtered.update(entry.unavailable)
    return entry, filtered, Best(config.top_candidates_explained)


def search_macs(index: FleetIndex, terms: JobTerms) -> SearchResult:
    config = index.config
    entry, filtered, best = search_prologue(index.mac_models, index.mac_count, terms, config)
    if entry is None:
        return best.result(filtered, 0, 0, None)
    speeds = _group_speeds(entry, terms, config)
    # Groups are fastest first: those from the first one below the job's minimum speed on are all too slow.
    fast_enough = bisect_right(speeds.negated_decodes, -terms.job.min_decode_tokens_per_s)
    keys = entry.mac_keys
    starts = entry.fit_starts_for(terms.memory.total_bytes)  # where the job starts to fit
    # Every serving Mac is either unavailable (counted by reason) or in one of the groups.
    available = entry.served - sum(entry.unavailable.values())
    if fast_enough < len(keys):  # most jobs ask for no speed: no copies then
        starts, below = starts[:fast_enough], sum(map(len, keys[fast_enough:]))
    else:
        below = 0
    does_not_fit = sum(starts)
    feasible = available - below - does_not_fit
    filtered[FilterReason.BELOW_MIN_SPEED] = below
    filtered[FilterReason.DOES_NOT_FIT] = does_not_fit
    scored = _scan_best_bound_first(entry, speeds, starts, terms, config, best)
    chosen = _break_mac_tie(best.ties, terms) if best.ties else None
    return best.result(filtered, feasible, scored, chosen)


class GroupSpeeds:
    """A model's groups as jobs of one shape see them: speeds, and the order of their best possible bounds.

    Built for a job's bytes per token and a speed target at or below the job's (a lower target
    only raises speed scores, so the bounds hold for every job of the shape); kept while the
    groups and their static bounds are unchanged.
    """

    __slots__ = ("decodes", "negated_decodes", "optimistic_bounds", "order", "target", "speed_scores",
                 "static_bounds")

    def __init__(self, groups: list[tuple[float, Group, bool]], bytes_per_token: int, target_at_most: float,
                 config: PlacementConfig) -> None:
        w_fit, w_speed, _, _, _ = config.weights.normalised
        self.decodes = [bandwidth / bytes_per_token for bandwidth, _, _ in groups]  # as decode_from_bandwidth
        self.negated_decodes = [-decode for decode in self.decodes]  # ascending: bisect for the speed cutoff
        # A perfect fit's bound: no group's real bound (its best fit's) is higher.
        self.optimistic_bounds = [w_fit * 1.0 + w_speed * min(decode / target_at_most, 1.0) + group.static_bound
                                  for decode, (_, group, _) in zip(self.decodes, groups)]
        # Best first; equal bounds keep group order, as the stable sort of exact bounds does.
        self.order = sorted(range(len(groups)), key=lambda i: -self.optimistic_bounds[i])
        # Most jobs' target is exactly this one (the comfortable pace): their speed scores are ready.
        self.target = target_at_most
        self.speed_scores = [min(decode / target_at_most, 1.0) for decode in self.decodes]
        self.static_bounds = [group.static_bound for _, group, _ in groups]


GROUP_SPEEDS_PER_MODEL_MAX: Final = 256  # job shapes remembered per model; past it the memory starts afresh
TARGET_STEPS_PER_OCTAVE: Final = 4  # speed targets above the comfortable pace share bounds within a quarter octave


def _group_speeds(entry: ModelEntry, terms: JobTerms, config: PlacementConfig) -> GroupSpeeds:
    target = _target_at_most(terms.speed_target, config.comfortable_decode_tokens_per_s)
    cache = entry.group_speeds
    shape = (terms.bytes_per_token, target)
    speeds = cache.get(shape)
    if speeds is None:
        if len(cache) >= GROUP_SPEEDS_PER_MODEL_MAX:
            cache.clear()
        speeds = cache[shape] = GroupSpeeds(entry.mac_groups, terms.bytes_per_token, target, config)
    return speeds


def _target_at_most(target: float, comfortable: float) -> float:
    """The target snapped down to a grid of quarter octaves above the comfortable pace (never above it)."""
    if target <= comfortable:
        return target
    steps = math.floor(math.log2(target / comfortable) * TARGET_STEPS_PER_OCTAVE)
    snapped = comfortable * 2.0 ** (steps / TARGET_STEPS_PER_OCTAVE)
    return snapped if snapped <= target else comfortable * 2.0 ** ((steps - 1) / TARGET_STEPS_PER_OCTAVE)


def _scan_best_bound_first(entry: ModelEntry, speeds: GroupSpeeds, starts: list[int], terms: JobTerms,
                           config: PlacementConfig, best: Best) -> int:
    """Scan groups in order of their exact bound (the best fit's), stopping when none can reach the top list.

    A group's exact bound is computed only once its optimistic bound could beat every exact bound
    known so far, so the groups are scanned in the same order as if all were computed first.
    """
    w_fit, w_speed, _, _, _ = config.weights.normalised
    span = config.best_fit_span_octaves
    need, target = terms.memory.total_bytes, terms.speed_target
    budget = config.scored_per_decision_max
    groups, keys, decodes = entry.mac_groups, entry.mac_keys, speeds.decodes
    optimistic, order, fast_enough = speeds.optimistic_bounds, speeds.order, len(starts)
    static_bounds = speeds.static_bounds
    speed_scores = speeds.speed_scores if target == speeds.target else None
    exact: list[tuple[float, int, float]] = []  # a heap of (-bound, group index, speed score)
    # Locals for the loop: best.floor changes only in a group scan, the heap's top only here. A group
    # waits while its optimistic bound is below cut = max(floor, the heap's best exact bound).
    floor, leading, order_count = best.floor, -math.inf, len(order)
    cut = floor
    next_in_order = scored = 0
    while True:
        while next_in_order < order_count:
            i = order[next_in_order]
            if optimistic[i] < cut:
                break
            next_in_order += 1
            if i >= fast_enough:
                continue
            group_keys, start = keys[i], starts[i]
            if start == len(group_keys):
                continue
            if speed_scores is not None:
                speed = speed_scores[i]
            else:
                speed = decodes[i] / target  # as speed_score
                if speed > 1.0:
                    speed = 1.0
            fit = 1.0 - log2((group_keys[start] >> FREE_SHIFT) / need) / span
            bound = w_fit * (fit if fit > 0.0 else 0.0) + w_speed * speed + static_bounds[i]
            heappush(exact, (-bound, i, speed))
            if bound > cut:
                cut = bound
        if not exact:
            return scored
        negated_bound, i, speed = heappop(exact)
        leading = -exact[0][0] if exact else -math.inf
        if -negated_bound < floor or scored >= budget:
            return scored
        _, group, warm = groups[i]
        scored += _scan_mac_group(group, starts[i], w_speed * speed, speed, decodes[i], warm, need, w_fit, span,
                                  config.scan_per_group_max, best, budget - scored)
        floor = best.floor
        cut = floor if floor > leading else leading


def _scan_mac_group(group: Group, start: int, weighted_speed: float, speed: float, decode: float, warm: bool,
                    need: int, w_fit: float, span: float, scan_max: int, best: Best, budget: int) -> int:
    """Score one group's Macs from its best fit until none can reach the top list.

    The job's and config's values come in as arguments: this runs a few times per decision.
    """
    keys = group.keys
    static_bound = group.static_bound
    end = start + (scan_max if scan_max < budget else budget)  # as min(), which costs a call
    if end > len(keys):
        end = len(keys)
    scored = 0
    floor = best.floor  # changes only when a Mac is offered
    single = Strategy.SINGLE  # read once: an enum class's attribute costs a hook call per read on 3.11
    i = start
    while i < end:
        key = keys[i]
        free = key >> FREE_SHIFT
        fit = 1.0 - log2(free / need) / span
        if fit < 0.0:
            fit = 0.0
        partial = w_fit * fit + weighted_speed  # total_score's expression, split for the bound
        if partial + static_bound < floor:
            break
        tail = key & TAIL_MASK
        score = partial + (STATIC_SCORE_SCALE - (tail >> STATIC_SHIFT)) / STATIC_SCORE_SCALE  # the key's static_score
        if score < floor:  # and so is every later Mac with this free memory (as skip_free_value)
            i += 1
            if i < end and keys[i] >> FREE_SHIFT == free:
                i = bisect_left(keys, (free + 1) << FREE_SHIFT, i)
            continue
        scored += 1
        scored_tuple = (score, tail & POSITION_MASK, free, fit, speed, warm, decode, single)
        run_last = key | POSITION_MASK  # the last key a Mac with this free memory and static score can have
        if i + 1 < len(keys) and keys[i + 1] <= run_last:  # a run of equals: their scores are identical
            run_end = bisect_right(keys, run_last, i + 1)
            best.offer((group, i, run_end), scored_tuple)  # the tie-break reads the run's end from here
            _offer_run_mates(keys, i, run_end, best, scored_tuple)
            i = run_end
        else:
            best.offer((group, i, i + 1), scored_tuple)
            i += 1
        floor = best.floor
    return scored


def skip_free_value(keys: list[int], i: int, free: int) -> int:
    """The first key after i with more free memory: same free memory sorts by static score, best first."""
    if i + 1 < len(keys) and keys[i + 1] >> FREE_SHIFT == free:
        return bisect_left(keys, (free + 1) << FREE_SHIFT, i + 1)
    return i + 1


def _offer_run_mates(keys: list[int], i: int, end: int, best: Best, scored: tuple) -> None:
    """The scan skips a run's mates, but the first few still go to the explanation's top list, as the
    exhaustive search lists them."""
    for mate in keys[i + 1: min(end, i + best.top_max)]:
        best.offer_for_top(_for_mate(scored, mate & POSITION_MASK))


def _for_mate(scored: tuple, position: int) -> tuple:
    """A run's scored tuple for another Mac of the run: only the position differs. Item by item, as
    compiled a starred slice builds a list and a slice before the tuple."""
    return (scored[0], position, scored[2], scored[3], scored[4], scored[5], scored[6], scored[7])


def _break_mac_tie(ties: list[tuple[tuple[Group, int, int], tuple]], terms: JobTerms) -> tuple:
    """Pick among all tied Macs by the job's seed, in position order (as the exhaustive search does).

    Each tie is a run of identical Macs, (group, start, end) as the scan found it.
    """
    if len(ties) == 1:  # one run, the common case; a run of one needs no seed
        (group, start, end), scored = ties[0]
        pick = terms.seed % (end - start) if end - start > 1 else 0
        return _for_mate(scored, group.keys[start + pick] & POSITION_MASK)
    # Runs from different speed classes can tie exactly. Each run's keys share everything above the
    # position, so they are in position order: walk the runs merged to the pick's turn, holding each
    # run's next position, rather than gathering and sorting every tied position (a Mac is in one run at most).
    run_keys: list[list[int]] = []
    nexts: list[int] = []  # each run's next key
    ends: list[int] = []
    heads: list[int] = []  # each run's next position; MAX_POSITIONS once it is used up
    total = 0
    for (group, start, end), _ in ties:
        keys = group.keys
        run_keys.append(keys)
        nexts.append(start)
        ends.append(end)
        heads.append(keys[start] & POSITION_MASK)
        total += end - start
    turn = terms.seed % total
    runs = len(heads)
    while True:
        lowest, position = 0, heads[0]
        for r in range(1, runs):
            head = heads[r]
            if head < position:
                lowest, position = r, head
        if not turn:
            scored = ties[lowest][1]
            return _for_mate(scored, position)
        turn -= 1
        following = nexts[lowest] + 1
        nexts[lowest] = following
        heads[lowest] = run_keys[lowest][following] & POSITION_MASK if following < ends[lowest] else MAX_POSITIONS


def single_could_ever_take(index: FleetIndex, terms: JobTerms) -> bool:
    """Some Mac serving the model, idle and online, would fit the job at the needed speed."""
    entry = index.mac_models.get(terms.job.model.model_id)
    if entry is None:
        return False
    need, bytes_per_token = terms.memory.total_bytes, terms.bytes_per_token
    min_decode = terms.job.min_decode_tokens_per_s
    for value in entry.classes.values():
        mac_class: MacClass = value  # typed: compiled, its fields are read directly
        ceilings = mac_class.ceilings
        # decode_tokens_per_s for a single Mac's profile, inline as in GroupSpeeds (the same float).
        if ceilings and ceilings[-1] >= need and mac_class.bandwidth_bytes_per_s / bytes_per_token >= min_decode:
            return True
    return False
