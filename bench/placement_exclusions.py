"""A re-run's cost: placing a job while the nodes that failed its check are excluded.

    .venv/bin/python -m bench.placement_exclusions [--macs 100000 --pods 5000 --reruns 200 --before-reruns 2]

A job whose check failed is re-run elsewhere: its decision must skip the nodes that failed it.
Before, the scheduler decided over a copy of the fleet without them: a snapshot of the whole
live index, then a new index built from it, inside the pass lock (seconds at 100,000 Macs).
Now they are a filter on the live index (FilterReason.EXCLUDED), filed out and back in for the
one decision. Both ways run here over the same fleet and jobs, and must choose alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from bench.fleet_sim import generate_jobs, simulate_fleet
from coordinator.placement import FleetIndex, FleetSnapshot, JobRequest, Placement, PlacementConfig, place
from coordinator.placement.compiled import build_status


def _without(fleet: FleetSnapshot, excluded: frozenset[str]) -> FleetSnapshot:
    """The old way's fleet: a copy without the excluded nodes and their pods."""
    return replace(fleet, macs=tuple(m for m in fleet.macs if m.node_id not in excluded),
                   pods=tuple(p for p in fleet.pods if not excluded & set(p.members)))


def _reruns(index: FleetIndex, jobs: list[JobRequest], count: int) -> list[tuple[JobRequest, frozenset[str]]]:
    """Jobs with the Mac each would be placed on now excluded, as if that Mac had failed its check."""
    found = []
    for job in jobs:
        decision = place(job, index)
        if isinstance(decision, Placement):
            found.append((job, frozenset(decision.node_ids)))
            if len(found) == count:
                break
    return found


def _time_ms(decide, reruns) -> tuple[list[float], list]:  # type: ignore[no-untyped-def]
    times, decisions = [], []
    for job, excluded in reruns:
        start = time.perf_counter()
        decisions.append(decide(job, excluded))
        times.append((time.perf_counter() - start) * 1e3)
    return times, decisions


def _chosen(decision) -> tuple:  # type: ignore[no-untyped-def]
    return decision.node_ids if isinstance(decision, Placement) else ("unplaceable", decision.permanent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--macs", type=int, default=100_000)
    parser.add_argument("--pods", type=int, default=5_000)
    parser.add_argument("--reruns", type=int, default=200, help="re-runs decided the new way")
    parser.add_argument("--before-reruns", type=int, default=2, help="of those, decided the old way too (slow)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    config = PlacementConfig()
    index = FleetIndex.build(simulate_fleet(args.macs, args.pods, args.seed, config), config)
    print(f"placement planner: {build_status().describe()}")
    print(f"fleet: {index.mac_count} Macs, {index.pod_count} pods")
    reruns = _reruns(index, list(generate_jobs(args.reruns * 4, args.seed + 1)), args.reruns)

    after, new = _time_ms(lambda job, excluded: place(job, index, excluded=excluded), reruns)
    before, old = _time_ms(lambda job, excluded: place(job, _without(index.snapshot(), excluded), config),
                           reruns[: args.before_reruns])
    assert all(_chosen(a) == _chosen(b) for a, b in zip(new, old)), "the two ways chose differently"
    assert all(not (set(_chosen(d)) & excluded) for d, (_, excluded) in zip(new, reruns)), "placed on an excluded node"
    print(f"before (a new index from a snapshot without the excluded nodes), {len(before)} re-runs: "
          f"mean {statistics.fmean(before):,.3f} ms per re-run")
    print(f"after (the live index, excluded nodes filtered out), {len(after)} re-runs: "
          f"mean {statistics.fmean(after):,.3f} ms, median {statistics.median(after):,.3f} ms, "
          f"max {max(after):,.3f} ms per re-run")
    print(f"same choices on the {len(old)} re-runs decided both ways")


if __name__ == "__main__":
    main()
