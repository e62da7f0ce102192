"""Run anvil as this process's child and end it when our parent dies, even by SIGKILL.

    python -m ledger.anvil_watchdog ANVIL ARGS...

The parent (ledger.anvil) holds the write end of a pipe on our stdin and never writes to it:
EOF on stdin means the parent is gone, however it ended. Then anvil gets SIGTERM, so it dumps
its state file and the next coordinator finds every anchored root. A pipe works the same on
Linux and macOS; on Linux anvil also gets PR_SET_PDEATHSIG (SIGKILL), so it cannot outlive
this watchdog should the watchdog itself be killed. SIGTERM or SIGINT sent to the watchdog
is passed on to anvil, and the watchdog exits with anvil's status.

Anvil's output goes through the watchdog, which drops it once the parent is gone: anvil
never writes to a closed pipe, which would end it before it dumps its state.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOP_TIMEOUT_S = 30.0  # how long anvil may take to dump its state after SIGTERM


def _die_with_parent() -> None:
    """In anvil's child before exec (Linux only): SIGKILL when the watchdog dies."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(127)  # cannot promise to die with the parent: refuse to start at all


def _stop(anvil: subprocess.Popen[bytes]) -> None:
    if anvil.poll() is None:
        anvil.send_signal(signal.SIGTERM)
        try:
            anvil.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            anvil.kill()


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -m ledger.anvil_watchdog ANVIL [ARGS...]\n")
        return 2
    # The watchdog is single-threaded here, so a preexec_fn is safe.
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    anvil = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             preexec_fn=preexec)  # noqa: PLW1509
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: anvil.send_signal(number))

    def watch_parent() -> None:
        while os.read(0, 4096):  # the parent never writes: only EOF ends this
            pass
        _stop(anvil)

    threading.Thread(target=watch_parent, name="parent-watch", daemon=True).start()
    relay = threading.Thread(target=_relay, args=(anvil,), name="output", daemon=True)
    relay.start()
    code = anvil.wait()
    relay.join(STOP_TIMEOUT_S)
    return code


def _relay(anvil: subprocess.Popen[bytes]) -> None:
    """Anvil's output to ours while the parent reads it; drained and dropped after."""
    assert anvil.stdout is not None
    parent_reads = True
    for line in anvil.stdout:
        if parent_reads:
            try:
                sys.stdout.buffer.write(line)
                sys.stdout.buffer.flush()
            except OSError:  # BrokenPipeError: the parent is gone
                parent_reads = False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
