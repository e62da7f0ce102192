"""The callgrind harness's measured child runs every part on a small saved fleet (no valgrind here:
outside it operator.call is an ordinary call) and leaves the planner as it found it; a compiled
planner's stages cannot be measured apart, and the child says so."""

from pathlib import Path

import pytest

from bench.placement_callgrind import PARTS, STAGES, prepare, run
from coordinator.placement import planner
from coordinator.placement.compiled import build_status


@pytest.mark.parametrize("part", PARTS)
def test_each_part_runs_on_a_saved_loaded_fleet(tmp_path: Path, part: str) -> None:
    state = tmp_path / "fleet.pickle"
    prepare(state, warm_up=60, jobs=20, seed=1, macs=400, pods=20)
    stages = (planner.IndexView.search_macs, planner.IndexView.search_pods, planner._explain)
    if part in STAGES and build_status().compiled:
        with pytest.raises(SystemExit, match="plain Python"):
            run(state, part)
        return
    run(state, part)
    assert (planner.IndexView.search_macs, planner.IndexView.search_pods, planner._explain) == stages
