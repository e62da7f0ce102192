"""Instructions per committed job, by part, under callgrind: repeatable whatever else the machine runs.

    .venv/bin/python -m bench.placement_callgrind [--warm-up 12000 --jobs 2000 --parts decide,commit]

Builds the benchmark's fleet (100,000 Macs, 5,000 pods, seed 1), commits `--warm-up` jobs
(releasing the oldest past 15,000 running, as bench/placement.py does) so the fleet is loaded,
and saves that state (the fleet's snapshot: a compiled index does not pickle, so the measured
child indexes it again before it counts). Then, for each part, it runs the next `--jobs` jobs
committing each placement under `valgrind --tool=callgrind --toggle-collect=_operator_call`: only what runs
inside operator.call is counted, and the part measured is the one called through it.
Parts: decide (place), commit (try_commit and release), job (both), macs, pods and explain
(the decision's stages; these three need the planner as plain Python, MLXNET_PURE_PYTHON=1 at
install, since a compiled one calls its stages directly). It prints instructions (Ir) per job for
each part. With the default counts no more than 14,000 jobs are ever running, so nothing is
released: commit is try_commit alone.

Wall-clock figures on the shared machine swing with the load; these counts do not. They
do not see what cache misses cost, which a loaded, changing fleet may pay more of.
"""

from __future__ import annotations

import argparse
import functools
import gc
import operator
import pickle
import tempfile
from collections import deque
from pathlib import Path

from bench.callgrind import counted_instructions
from bench.fleet_sim import generate_jobs, simulate_fleet
from bench.placement import commit_and_release
from coordinator.placement import FleetIndex, Placement, PlacementConfig, place, planner
from coordinator.placement.compiled import build_status

STAGES = ("macs", "pods", "explain")  # measured by patching the planner, which a compiled one does not allow
PARTS = ("decide", "commit", "job", *STAGES)
RUNNING_MAX = 15_000


# A partial, not a wrapper: no extra Python frame inside the counted call.
_commit = functools.partial(commit_and_release, running_max=RUNNING_MAX)


def prepare(path: Path, warm_up: int, jobs: int, seed: int, macs: int = 100_000, pods: int = 5_000) -> None:
    config = PlacementConfig()
    index = FleetIndex.build(simulate_fleet(macs, pods, seed, config), config)
    all_jobs = list(generate_jobs(warm_up + jobs, seed + 3))
    running: deque = deque()
    for job in all_jobs[:warm_up]:
        decision = place(job, index)
        if isinstance(decision, Placement):
            _commit(index, running, decision)
    with path.open("wb") as file:
        pickle.dump((index.snapshot(), running, all_jobs[warm_up:]), file, protocol=pickle.HIGHEST_PROTOCOL)


def run(path: Path, part: str) -> None:
    """Runs under callgrind: the part goes through operator.call, everything else around it."""
    planner_build = build_status()
    if part in STAGES and planner_build.compiled:
        raise SystemExit(f"the {part} part needs the placement planner as plain Python: it is "
                         f"{planner_build.describe()}; install with MLXNET_PURE_PYTHON=1 to measure it")
    with path.open("rb") as file:
        snapshot, running, jobs = pickle.load(file)
    index = FleetIndex.build(snapshot, PlacementConfig())
    gc.collect()
    gc.freeze()  # the loaded fleet lives for the whole run: no collection of it inside a measured part
    measured, direct = operator.call, (lambda function, *args: function(*args))
    decide = measured if part in ("decide", "job") else direct
    commit = measured if part in ("commit", "job") else direct
    # A stage is measured by routing it through operator.call for this run only; put back afterwards.
    search_macs, search_pods, explain = planner.IndexView.search_macs, planner.IndexView.search_pods, planner._explain
    if part == "macs":
        planner.IndexView.search_macs = lambda view, terms: measured(search_macs, view, terms)
    elif part == "pods":
        planner.IndexView.search_pods = lambda view, terms: measured(search_pods, view, terms)
    elif part == "explain":
        planner._explain = lambda *args: measured(explain, *args)
    try:
        for job in jobs:
            decision = decide(place, job, index)
            if isinstance(decision, Placement):
                commit(_commit, index, running, decision)
    finally:
        planner.IndexView.search_macs, planner.IndexView.search_pods, planner._explain = \
            search_macs, search_pods, explain


def measure(path: Path, part: str) -> int:
    """Instructions counted for the part over all jobs."""
    return counted_instructions("bench.placement_callgrind", "--run", str(path), "--part", part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm-up", type=int, default=12_000)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--parts", default="decide,commit")
    parser.add_argument("--state", type=Path, help="reuse (or keep) the saved loaded fleet here")
    parser.add_argument("--run", type=Path, help=argparse.SUPPRESS)  # the measured child
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run is not None:
        run(args.run, args.part)
        return
    parts = args.parts.split(",")
    assert all(part in PARTS for part in parts), f"parts are {', '.join(PARTS)}"
    with tempfile.TemporaryDirectory() as scratch:
        state = args.state or Path(scratch) / "fleet.pickle"
        if not state.exists():
            prepare(state, args.warm_up, args.jobs, args.seed)
        for part in parts:
            print(f"{part}: {measure(state, part) / args.jobs / 1e3:,.1f}k instructions per job "
                  f"({args.jobs} jobs after {args.warm_up} committed)", flush=True)


if __name__ == "__main__":
    main()
