"""Instructions per keyed submit, under callgrind: repeatable whatever else the machine runs.

    .venv/bin/python -m bench.submit_callgrind [--submits 100]

The set-up of bench/submit_scale.py with one Mac: a coordinator service in this process
over a fresh SQLite file, one API key with a deposit. Each submit is placed at once and
committed without waiting for the disk (as the HTTP gateway does), then cancelled so the
Mac is free again. The child runs under `valgrind --tool=callgrind
--toggle-collect=_operator_call`, and only submit_job is called through operator.call, so
only the submit is counted; the first 20 submits (the index's build) are not.

Wall-clock figures for the same submit are bench/submit_scale.py's; on this shared VM they
swing with its speed, these counts do not.
"""

from __future__ import annotations

import argparse
import operator
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.submit_scale import MODEL, _register
from coordinator.api_keys import KeyLimits
from coordinator.clock import SystemClock
from coordinator.config import CoordinatorConfig
from coordinator.database import Database, upgrade_schema
from coordinator.service import CoordinatorService
from coordinator.records import JobStatus
from coordinator.submission import Submission
from mlxnet import keys_cli

UNCOUNTED_SUBMITS = 20


def run(submits: int) -> None:
    """Runs under callgrind: the counted submits go through operator.call."""
    with tempfile.TemporaryDirectory(prefix="mlxnet-bench-submit-") as tmp:
        url = f"sqlite:///{tmp}/coordinator.db"
        upgrade_schema(url)
        db = Database(url)
        # Under callgrind the run outlasts a node's heartbeat window; it must stay online.
        config = CoordinatorConfig(database_url=url, node_offline_after_ms=24 * 3600 * 1000)
        service = CoordinatorService(db, SystemClock(), config)
        _register(service, Path(tmp) / "mac0.pem")
        _, key = keys_cli.create(db, "bench", KeyLimits(), deposit_amount=10**15)
        caller = service.authenticate_consumer(key, to_submit=True)
        assert caller.key is not None
        sub = Submission(consumer_id="bench", model_id=MODEL.model_id, prompt="Hello", max_tokens=8,
                         temperature=0.0, top_p=0.0, seed=0, request_id="", min_decode_tokens_per_s=0.0,
                         api_key_id=caller.key.key_id)
        uncounted = lambda function, *args, **kwargs: function(*args, **kwargs)  # noqa: E731
        for number in range(UNCOUNTED_SUBMITS + submits):
            call = operator.call if number >= UNCOUNTED_SUBMITS else uncounted
            view = call(service.submit_job, sub, caller, durable=False)
            assert view.job.status is JobStatus.ASSIGNED, "every submit must be placed at once"
            service.cancel_job(view.job.job_id, caller)
        db.dispose()


def measure(submits: int) -> int:
    """Instructions counted over all the counted submits."""
    command = ["valgrind", "--tool=callgrind", "--toggle-collect=_operator_call", "--callgrind-out-file=/dev/null",
               sys.executable, "-m", "bench.submit_callgrind", "--run", "--submits", str(submits)]
    finished = subprocess.run(command, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : ([\d,]+)", finished.stderr)
    assert found is not None, f"no callgrind totals in: {finished.stderr[-500:]}"
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submits", type=int, default=100)
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)  # the measured child
    args = parser.parse_args()
    if args.run:
        run(args.submits)
        return
    print(f"{measure(args.submits) / args.submits / 1e6:.2f}M instructions per keyed submit "
          f"(1 Mac, SQLite, {args.submits} submits after {UNCOUNTED_SUBMITS} uncounted)")


if __name__ == "__main__":
    main()
