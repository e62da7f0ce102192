"""`mlxnet jobs get|explain JOB` and `mlxnet place --dry-run`: look at placement decisions."""

from __future__ import annotations

import argparse
import sys

from mlxnet.consumer import JobRequestError, add_trust_arguments, client_from_args
from mlxnet.explain_view import render_explanation
from protos.mlxnet.v1 import job_pb2


def add_subcommands(commands: argparse._SubParsersAction) -> None:
    jobs = commands.add_parser("jobs", help="look at a job")
    jobs_commands = jobs.add_subparsers(dest="jobs_command", required=True)
    for name, handler, text in (("get", _get, "status, placement and receipt of a job"),
                                ("explain", _explain, "why a job went where it did")):
        parser = jobs_commands.add_parser(name, help=text)
        parser.add_argument("job_id")
        parser.add_argument("--coordinator", default="127.0.0.1:50051")
        add_trust_arguments(parser)
        parser.set_defaults(handler=handler)
    place = commands.add_parser("place", help="where a job would go now (--dry-run)")
    place.add_argument("--dry-run", action="store_true", required=True,
                       help="only explain; nothing is placed")
    place.add_argument("--model", required=True)
    place.add_argument("--context", type=int, required=True, help="context length in tokens")
    place.add_argument("--min-tokens-per-s", type=float, default=0.0)
    place.add_argument("--coordinator", default="127.0.0.1:50051")
    add_trust_arguments(place)
    place.set_defaults(handler=_place)


def _fail(error: JobRequestError) -> int:
    sys.stderr.write(f"mlxnet: {error.code}: {error.message}\n")
    return 1


def _get(args: argparse.Namespace) -> int:
    try:
        with client_from_args(args) as client:
            job = client.get(args.job_id)
    except JobRequestError as error:
        return _fail(error)
    status = job_pb2.JobStatus.Name(job.status).removeprefix("JOB_STATUS_").lower()
    lines = [f"job {job.job_id}: {status}", f"  model     {job.model}"]
    if job.queue_position:
        lines.append(f"  queue     position {job.queue_position}")
    if job.node_ids:
        lines.append(f"  placed on {', '.join(job.node_ids)} ({job.strategy}; {', '.join(job.chips)})")
    lines.append(f"  tokens    {job.prompt_tokens} prompt + {job.completion_tokens} generated")
    if job.error:
        lines.append(f"  error     {job.error}")
    if job.receipt.body:
        lines.append(f"  receipt   {'verified' if job.receipt_verified else 'not verified'}; "
                     f"credited {job.credited_base_units} base units")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _explain(args: argparse.Namespace) -> int:
    try:
        with client_from_args(args) as client:
            job = client.get(args.job_id)
    except JobRequestError as error:
        return _fail(error)
    sys.stdout.write(f"job {job.job_id} ({job.model}):\n"
                     + render_explanation(job.placement_explanation_json) + "\n")
    return 0


def _place(args: argparse.Namespace) -> int:
    try:
        with client_from_args(args) as client:
            answer = client.explain_placement(args.model, args.context, args.min_tokens_per_s)
    except JobRequestError as error:
        return _fail(error)
    if answer.placeable:
        sys.stdout.write(f"would place on {', '.join(answer.node_ids)} ({answer.strategy}, layers "
                         f"{list(answer.layer_split)}): ~{answer.predicted_decode_tokens_per_s:.1f} "
                         f"tok/s, first token in ~{answer.predicted_time_to_first_token_s:.2f}s\n")
    else:
        kind = "never placeable" if answer.permanent else "must wait"
        sys.stdout.write(f"{kind}: {answer.reason}\n")
    sys.stdout.write(answer.explanation_text + "\n")
    return 0
