"""The callgrind harness's measured child runs every part on a small saved fleet (no valgrind here:
outside it operator.call is an ordinary call) and leaves the planner as it found it."""

from pathlib import Path

import pytest

from bench.placement_callgrind import PARTS, prepare, run
from coordinator.placement import planner


@pytest.mark.parametrize("part", PARTS)
def test_each_part_runs_on_a_saved_loaded_fleet(tmp_path: Path, part: str) -> None:
    state = tmp_path / "fleet.pickle"
    prepare(state, warm_up=60, jobs=20, seed=1, macs=400, pods=20)
    stages = (planner.IndexView.search_macs, planner.IndexView.search_pods, planner._explain)
    run(state, part)
    assert (planner.IndexView.search_macs, planner.IndexView.search_pods, planner._explain) == stages
