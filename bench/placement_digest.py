"""A digest of the placement benchmark's decisions, to show a speed-up changed no decision.

    .venv/bin/python -m bench.placement_digest [--jobs 20000]

Builds the benchmark's fleet (100,000 Macs, 5,000 pods, seed 1), places `--jobs` jobs
read-only and then `--jobs` more committing each placement (releasing the oldest past
15,000 running), as bench/placement.py does. Prints three digests: one over the decisions
(where each job went, what it reserved, its score), one over their explanations
(to_dict, which is what the scheduler stores), and one over the explanations without the
Macs' `scored` count. A search that scans fewer Macs may change only that count, so the
first and third must stay equal across optimisations; the second shows whether it changed.
With the defaults they were decision c4035d8d81f0edcb, explanation 0be68098ba3dbbe3; since the
time-to-first-token fix (a warm model loads nothing) decision 1150c7a4099eb4a2, explanation unchanged,
and without the scored count 8f5ae1bb8e9b3051.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import deque

from bench.fleet_sim import generate_jobs, simulate_fleet
from coordinator.placement import FleetIndex, Placement, PlacementConfig, Unplaceable, place
from coordinator.placement.compiled import build_status


def decision_record(decision: Placement | Unplaceable) -> str:
    if isinstance(decision, Placement):
        return repr((decision.job_id, decision.node_ids, decision.strategy.value, decision.layer_split,
                     decision.reserved_memory_bytes, decision.score, decision.predicted_decode_tokens_per_s,
                     decision.predicted_prefill_tokens_per_s, decision.predicted_time_to_first_token_s))
    return repr((decision.job_id, decision.permanent, decision.reason))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--macs", type=int, default=100_000)
    parser.add_argument("--pods", type=int, default=5_000)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--running", type=int, default=15_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    config = PlacementConfig()
    index = FleetIndex.build(simulate_fleet(args.macs, args.pods, args.seed, config), config)
    decisions, explanations, unscored = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()

    def record(decision: Placement | Unplaceable) -> None:
        decisions.update(decision_record(decision).encode())
        explained = decision.explanation.to_dict()
        explanations.update(json.dumps(explained, sort_keys=True).encode())
        del explained["macs"]["scored"]  # how much the search scanned, not what it found
        unscored.update(json.dumps(explained, sort_keys=True).encode())

    for job in generate_jobs(args.jobs, args.seed + 1):
        record(place(job, index))
    running: deque = deque()
    for job in generate_jobs(args.jobs, args.seed + 3):
        decision = place(job, index)
        record(decision)
        if isinstance(decision, Placement):
            if index.try_commit(decision):
                running.append((decision.node_ids, decision.reserved_memory_bytes, decision.model_id,
                                decision.shared_memory_bytes))
            if len(running) > args.running:
                index.release_shares(*running.popleft())
    print(f"placement planner: {build_status().describe()}")
    print(f"{2 * args.jobs} decisions: decision digest {decisions.hexdigest()[:16]}, "
          f"explanation digest {explanations.hexdigest()[:16]}, "
          f"explanation digest without the Macs' scored count {unscored.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
