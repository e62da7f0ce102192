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

from bench.callgrind import counted_instructions
from bench.submit_scale import keyed_service
from coordinator.model import JobStatus

UNCOUNTED_SUBMITS = 20


def run(submits: int) -> None:
    """Runs under callgrind: the counted submits go through operator.call."""
    with keyed_service(1) as (service, caller, sub):
        uncounted = lambda function, *args, **kwargs: function(*args, **kwargs)  # noqa: E731
        for number in range(UNCOUNTED_SUBMITS + submits):
            call = operator.call if number >= UNCOUNTED_SUBMITS else uncounted
            view = call(service.submit_job, sub, caller, durable=False)
            assert view.job.status is JobStatus.ASSIGNED, "every submit must be placed at once"
            service.cancel_job(view.job.job_id, caller)


def measure(submits: int) -> int:
    """Instructions counted over all the counted submits."""
    return counted_instructions("bench.submit_callgrind", "--run", "--submits", str(submits))


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
