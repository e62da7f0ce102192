"""Paths to the macOS fixtures: recorded (real outputs) and hand-written (never recorded)."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "macos"
RECORDED = FIXTURES / "recorded"
HAND_WRITTEN = FIXTURES / "hand_written"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text(encoding="utf-8")


def hand_written(name: str) -> str:
    return (HAND_WRITTEN / name).read_text(encoding="utf-8")


def merged_profiler_json(*texts: str) -> str:
    """One `system_profiler -json A B C` document built from per-data-type files."""
    document: dict[str, object] = {}
    for text in texts:
        document.update(json.loads(text))
    return json.dumps(document)
