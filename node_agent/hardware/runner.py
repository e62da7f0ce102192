"""Running hardware commands: the one place that touches subprocess.

Discovery takes a Runner, so tests drive it with recorded outputs instead of
a Mac. A runner returns stdout, or raises CommandError when the command is
missing, exits non-zero or runs past its timeout.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence

from node_agent.hardware.errors import CommandError

Runner = Callable[[Sequence[str], float], str]  # (argv, timeout_s) -> stdout
_STDERR_CHARS_MAX = 300


def subprocess_runner(argv: Sequence[str], timeout_s: float) -> str:
    """Run argv without a shell and return its stdout."""
    command = tuple(argv)
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as error:
        raise CommandError(command, "not found on PATH") from error
    except subprocess.TimeoutExpired as error:
        raise CommandError(command, f"no answer within {timeout_s:g} s") from error
    except OSError as error:
        raise CommandError(command, f"could not start: {error}") from error
    if completed.returncode != 0:
        stderr = completed.stderr.strip()[:_STDERR_CHARS_MAX]
        raise CommandError(command, f"exit status {completed.returncode}: {stderr}")
    return completed.stdout
