"""freeze_start_up_heap: start-up garbage is collected, the rest frozen, later garbage still collected.

Each check runs in a fresh interpreter: freezing is for the life of a process, and the test
process's own heap must stay as it is."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gc, weakref
    from mlxnet.heap import freeze_start_up_heap

    class Node:
        pass

    def garbage_cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    gc.disable()  # only the calls below collect
    before = garbage_cycle()
    kept = Node()
    kept.itself = kept  # alive and cyclic: frozen, never walked again
    freeze_start_up_heap()
    assert before() is None, "start-up garbage survived the freeze"
    assert gc.get_freeze_count() > 0
    assert any(obj is kept for obj in gc.get_objects()) is False, "a frozen object is still tracked"
    after = garbage_cycle()
    gc.collect()
    assert after() is None, "garbage made after the freeze was not collected"
    print("ok")
""")


def test_start_up_garbage_is_collected_and_the_rest_frozen() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
