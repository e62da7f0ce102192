"""Counting a benchmark child's instructions with callgrind, for the *_callgrind benchmarks.

Only what runs inside operator.call is counted (`--toggle-collect=_operator_call`): the
child routes the part it measures through it, and everything else around it.
"""

from __future__ import annotations

import re
import subprocess
import sys


def counted_instructions(module: str, *arguments: str) -> int:
    """Run `python -m module arguments` under callgrind; the instructions counted inside operator.call."""
    command = ["valgrind", "--tool=callgrind", "--toggle-collect=_operator_call", "--callgrind-out-file=/dev/null",
               sys.executable, "-m", module, *arguments]
    finished = subprocess.run(command, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : ([\d,]+)", finished.stderr)
    assert found is not None, f"no callgrind totals in: {finished.stderr[-500:]}"
    return int(found.group(1).replace(",", ""))
