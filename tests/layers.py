"""The coordinator's rooms as layers, and the imports that break them.

`python -m tests.layers` prints every import loop between coordinator modules and every
import of a module from a higher layer; tests/test_layers.py asserts there are none.
A room may import rooms of lower layers and modules of its own room.

It also prints the two edges of the ledger: the coordinator and the CLI import the ledger
through ledger.api only, and only ledger/storage/ builds SQL (every other ledger module
takes a Session and nothing else from SQLAlchemy).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. Rooms in one tuple are peers: they must not import each other. Modules of
# one folder may import each other (loops are still refused); verification's pure rules sit
# below config, which carries their policy, and its stateful half above money.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("model", "clock", "errors", "tls"),
    ("placement",),
    ("metrics",),  # the registry and its recording calls; metrics.readings reads the database
    ("verification.policy", "verification.tolerances", "verification.judge", "verification.tokens",
     "verification.peers"),
    ("config",),
    ("storage",),
    ("live",),
    ("money",),
    ("verification",),
    ("metrics.readings",),
    ("jobs",),
    ("nodes",),
    ("scheduling",),
    ("service",),
    ("rpc", "world"),
    ("gateway",),
    ("background",),
    ("server",),
)


@dataclass(frozen=True)
class Edge:
    importer: str  # dotted module below coordinator, e.g. "jobs.results"
    imported: str


def room_of(module: str) -> str:
    """The longest room name that prefixes the module."""
    rooms = [room for layer in LAYERS for room in layer]
    matches = [r for r in rooms if module == r or module.startswith(r + ".")]
    assert matches, f"coordinator.{module} is in no room of tests/layers.py"
    return max(matches, key=len)


def rank_of(room: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if room in layer)


def coordinator_modules() -> dict[str, Path]:
    base = ROOT / "coordinator"
    modules = {}
    for path in base.rglob("*.py"):
        parts = path.relative_to(base).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            modules[".".join(parts)] = path
    return modules


def imports(path: Path, known: set[str]) -> set[str]:
    """Coordinator modules this file imports at run time (TYPE_CHECKING blocks count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "coordinator":
                found |= {a.name for a in node.names if a.name in known}
            elif node.module.startswith("coordinator."):
                base = node.module.removeprefix("coordinator.")
                found |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known} or {base}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("coordinator.") for a in node.names
                      if a.name.startswith("coordinator.")}
    return {m for m in found if m in known}


def edges() -> list[Edge]:
    modules = coordinator_modules()
    known = set(modules)
    return [Edge(name, target) for name, path in sorted(modules.items())
            for target in sorted(imports(path, known)) if target != name]


def upward(all_edges: list[Edge]) -> list[Edge]:
    """Imports of a higher layer, or of a peer room in the same layer."""
    bad = []
    for edge in all_edges:
        a, b = room_of(edge.importer), room_of(edge.imported)
        same_folder = a.split(".")[0] == b.split(".")[0]  # a package's modules may import each other
        if not same_folder and rank_of(b) >= rank_of(a):
            bad.append(edge)
    return bad


def loops(all_edges: list[Edge]) -> list[tuple[str, ...]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    graph: dict[str, list[str]] = {}
    for edge in all_edges:
        graph.setdefault(edge.importer, []).append(edge.imported)
        graph.setdefault(edge.imported, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(tuple(sorted(group)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


LEDGER_API = "ledger.api"
LEDGER_CALLERS = ("coordinator", "mlxnet")  # packages that may use the ledger through its API only
LEDGER_STORAGE = "ledger.storage"
SQL_FREE_NAMES = {"sqlalchemy.orm": {"Session"}}  # what a ledger module outside storage may take


def imported_names(path: Path) -> list[tuple[str, str]]:
    """(module, name) for each `from module import name`, and (module, "") for each `import module`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((alias.name, "") for alias in node.names)
    return found


def ledger_imports_past_api(packages: tuple[str, ...] = LEDGER_CALLERS) -> list[str]:
    """Imports of a ledger module other than ledger.api from the packages that call the ledger."""
    bad = []
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            for module, name in imported_names(path):
                target = f"{module}.{name}" if module == "ledger" and name else module
                if (target == "ledger" or target.startswith("ledger.")) and target != LEDGER_API:
                    bad.append(f"{path.relative_to(ROOT)} imports {target}")
    return bad


def ledger_sql_outside_storage() -> list[str]:
    """Ledger modules outside ledger/storage/ that import SQLAlchemy beyond a Session, or the storage's tables."""
    bad = []
    for path in sorted((ROOT / "ledger").rglob("*.py")):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if dotted.startswith(LEDGER_STORAGE):
            continue
        for module, name in imported_names(path):
            if module.split(".")[0] == "sqlalchemy" and name not in SQL_FREE_NAMES.get(module, set()):
                bad.append(f"{dotted} imports {module}.{name or '*'}")
            if (module, name) == (LEDGER_STORAGE, "tables") or module == f"{LEDGER_STORAGE}.tables":
                if dotted != LEDGER_API:  # the API hands out the MetaData, to install the tables
                    bad.append(f"{dotted} imports {LEDGER_STORAGE}.tables")
    return bad


def main() -> int:
    all_edges = edges()
    bad, cycles = upward(all_edges), loops(all_edges)
    past_api, sql = ledger_imports_past_api(), ledger_sql_outside_storage()
    for edge in bad:
        sys.stdout.write(f"upward: coordinator.{edge.importer} imports coordinator.{edge.imported}\n")
    for group in cycles:
        sys.stdout.write(f"loop: {' <-> '.join(group)}\n")
    for line in past_api:
        sys.stdout.write(f"past the ledger API: {line}\n")
    for line in sql:
        sys.stdout.write(f"ledger SQL outside ledger/storage: {line}\n")
    sys.stdout.write(f"{len(all_edges)} imports between coordinator modules; "
                     f"{len(bad)} upward, {len(cycles)} loops; "
                     f"{len(past_api)} ledger imports past ledger.api, {len(sql)} ledger SQL imports outside storage\n")
    return 1 if bad or cycles or past_api or sql else 0


if __name__ == "__main__":
    raise SystemExit(main())
