"""The long-running processes' start-up heap, kept out of the garbage collector's way."""

from __future__ import annotations

import gc


def freeze_start_up_heap() -> None:
    """Collect what start-up left behind, then freeze the rest for the life of the process.

    Modules, protobuf descriptors, SQLAlchemy's metadata and the tokenizer's tables live as
    long as the process. Unfrozen, every full collection walks them again: 128 ms in a
    coordinator serving the gateway and 40 ms in a node (bench.gateway's processes), a stall
    in the middle of some unlucky request. Frozen, the coordinator's takes about 4 ms (and a
    busy ledger, which triggers one every few batches, paid about 30 us less a job payment).
    """
    gc.collect()
    gc.freeze()
