"""A keyed submit's cost as the fleet grows: it must not read every Mac.

    .venv/bin/python -m bench.submit_scale [--macs 1 1000 5000] [--submits 200]

For each fleet size: a coordinator service in this process over a fresh SQLite file,
that many simulated Macs registered (each can run one job), one API key with a
deposit. Then `--submits` times: submit a job (placed at once, committed without
waiting for the disk, as the HTTP gateway does), and cancel it so the Mac is free
again. Prints the median wall-clock and this thread's CPU time per submit.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from contracts.hardware import ChipTier, HardwareReport
from contracts.models import ModelSpec
from coordinator.clock import SystemClock
from coordinator.config import CoordinatorConfig, RegistrationLimits
from coordinator.jobs.submission import Submission
from coordinator.money.api_keys import Caller, KeyLimits
from coordinator.service import CoordinatorService
from coordinator.storage.database import Database, upgrade_schema
from mlxnet import keys_cli
from node_agent.identity import load_or_create_identity
from tests.node_registration import register_node

GIB = 1 << 30
MODEL = ModelSpec(model_id="bench/small", weights_bytes=GIB, parameter_count=500_000_000, num_layers=8,
                  num_attention_heads=8, num_kv_heads=8, head_dim=64, max_context_tokens=4096,
                  weights_digest="5a" * 32, vocab_size=32_000)
HARDWARE = HardwareReport(chip="Apple M4 Max", chip_family="M4", chip_tier=ChipTier.MAX,
                          memory_bytes=128 * GIB, gpu_working_set_bytes=96 * GIB, gpu_cores=40,
                          memory_bandwidth_gb_s=546.0, os_name="macOS", simulated=True)


def _register(service: CoordinatorService, key_path: Path) -> None:
    identity = load_or_create_identity(key_path)
    register_node(service, identity, HARDWARE, (MODEL,), "bench", display_name=key_path.stem)


@contextlib.contextmanager
def keyed_service(macs: int) -> Iterator[tuple[CoordinatorService, Caller, Submission]]:
    """A service over a fresh SQLite file with `macs` Macs, a funded key's caller and a submission."""
    with tempfile.TemporaryDirectory(prefix="mlxnet-bench-submit-") as tmp:
        url = f"sqlite:///{tmp}/coordinator.db"
        upgrade_schema(url)
        db = Database(url)
        # Registering thousands (or running under callgrind) takes longer than a node stays
        # online without heartbeats.
        # One operator registers them all: its join limit is lifted for the bench.
        config = CoordinatorConfig(database_url=url, node_offline_after_ms=24 * 3600 * 1000,
                                   registration_limits=RegistrationLimits(per_operator_burst=macs + 1))
        service = CoordinatorService(db, SystemClock(), config)
        for number in range(macs):
            _register(service, Path(tmp) / f"mac{number}.pem")
        _, key = keys_cli.create(db, "bench", KeyLimits(), deposit_amount=10**15)
        caller = service.jobs.authenticate_consumer(key, to_submit=True)
        sub = Submission(consumer_id="bench", model_id=MODEL.model_id, prompt="Hello", max_tokens=8,
                         temperature=0.0, top_p=0.0, seed=0, request_id="", min_decode_tokens_per_s=0.0,
                         api_key_id=caller.key.key_id if caller.key else None)
        try:
            yield service, caller, sub
        finally:
            db.dispose()


def measure(macs: int, submits: int) -> tuple[float, float]:
    """Median (wall ms, CPU ms) of a keyed submit with `macs` Macs registered."""
    with keyed_service(macs) as (service, caller, sub):
        walls, cpus = [], []
        for _ in range(submits):
            wall, cpu = time.perf_counter(), time.thread_time()
            view = service.jobs.submit(sub, caller, durable=False)
            walls.append((time.perf_counter() - wall) * 1e3)
            cpus.append((time.thread_time() - cpu) * 1e3)
            service.jobs.cancel(view.job.job_id, caller)
    skip = min(10, submits // 2)  # the first builds the index
    return statistics.median(walls[skip:]), statistics.median(cpus[skip:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--macs", type=int, nargs="+", default=[1, 1000, 5000])
    parser.add_argument("--submits", type=int, default=200)
    args = parser.parse_args()
    for macs in args.macs:
        wall, cpu = measure(macs, args.submits)
        print(f"{macs:>6} Macs: submit p50 {wall:.2f} ms wall, {cpu:.2f} ms CPU")


if __name__ == "__main__":
    main()
