"""Whether the placement planner runs compiled (mypyc, see setup.py), and whether that build is current.

Only the standard library here: setup.py reads COMPILED_MODULES from this file before anything is built.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
from dataclasses import dataclass

# The decision's and the commit's path (planner.decide, FleetIndex.try_commit), with natives, whose
# Final names the scan loops then read from C statics. decision.py and explain.py stay plain Python:
# their frozen dataclasses are made a few times per decision, and other packages build them too.
COMPILED_MODULES = (
    "coordinator.placement.assemble",
    "coordinator.placement.filters",
    "coordinator.placement.index",
    "coordinator.placement.memory",
    "coordinator.placement.natives",
    "coordinator.placement.planner",
    "coordinator.placement.pod_search",
    "coordinator.placement.pods",
    "coordinator.placement.scored",
    "coordinator.placement.scoring",
    "coordinator.placement.search",
    "coordinator.placement.speed",
    "coordinator.placement.terms",
    "coordinator.placement.vocabulary",
)


@dataclass(frozen=True)
class BuildStatus:
    compiled: tuple[str, ...]  # modules loaded from a compiled extension
    interpreted: tuple[str, ...]  # modules loaded from their Python source
    stale: tuple[str, ...]  # compiled before their source last changed: the extension runs old code

    @property
    def fully_compiled(self) -> bool:
        return not self.interpreted

    def describe(self) -> str:
        if self.stale:
            return (f"compiled with mypyc, but {', '.join(self.stale)} changed since: "
                    "run `make compile` (or pip install -e . again)")
        if not self.compiled:
            return "plain Python (not compiled: see setup.py)"
        if self.interpreted:
            return f"partly compiled with mypyc; plain Python: {', '.join(self.interpreted)}"
        return "compiled with mypyc"


def build_status() -> BuildStatus:
    compiled, interpreted, stale = [], [], []
    for name in COMPILED_MODULES:
        path = importlib.import_module(name).__file__ or ""
        if not path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            interpreted.append(name)
            continue
        compiled.append(name)
        source = os.path.join(os.path.dirname(path), name.rpartition(".")[2] + ".py")
        if os.path.exists(source) and os.path.getmtime(source) > os.path.getmtime(path):
            stale.append(name)
    return BuildStatus(tuple(compiled), tuple(interpreted), tuple(stale))
