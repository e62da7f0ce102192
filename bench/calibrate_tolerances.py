"""Calibrate the verifier's tolerances: how far honest replays stray, how far cheats land.

Decodes the same varied jobs on several honest set-ups, each in its own process:

- the bundled reference BLAS (what `pip install mlx[cpu]` gives);
- Debian's OpenBLAS preloaded (if /usr/lib/x86_64-linux-gnu/openblas-pthread is present);
- 2-rank tensor parallel over `mlx.launch --backend ring` (rank results checked one by one,
  since mlx.launch exits 0 even when a rank fails);
- continuous batches of 4, 8, 16 and 32 jobs (half join a few steps late, so rows are padded:
  tests.adversarial.harness.run_batched), as a busy node runs them;
- OpenBLAS on 2 and 4 threads (a checker's thread count need not match the node's);

and on every cheating model of tests/adversarial/models.py. One verifier (this process,
bundled BLAS) replays every job with the right model and measures, per chunk of the
activation commitment, how many of the top_k committed values (64 in version 2) differ from its own by more
than t quantization units, for several t, and how many tokens fail the sampler check.

    .venv/bin/python bench/calibrate_tolerances.py [--jobs 60] [--max-tokens 96] [--modes ...] [--no-cheats]

It prints one table; the defaults in coordinator/verification/tolerances.py come from it.
Then every honest job of every set-up goes through the coordinator's whole check (the door
and the replay judged with the current tolerances), and it prints the false rejections:
`--jobs 100` over the 6 honest set-ups is 600 honest checked jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts.commitments import (  # noqa: E402
    COMMITMENT_VERSION, TOP_K, chunk_key, decode_commitment, value_differences,
)
from contracts.receipts import decode_receipt  # noqa: E402
from coordinator.verification.tokens import Sampling, make_token_check  # noqa: E402
from coordinator.verification.tolerances import DEFAULT_TOLERANCES  # noqa: E402
from tests.adversarial.harness import MODEL_ID, Coordinator, HonestNode, Job, varied_jobs  # noqa: E402

THRESHOLDS = (0, 1, 2, 4, 8, 16)
HONEST_MODES = ("bundled-blas", "batch-4", "batch-8", "batch-16", "batch-32", "tensor-parallel", "openblas",
                "openblas-2-threads", "openblas-4-threads")
OPENBLAS = Path(os.environ.get("MLXNET_OPENBLAS", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"))


def _reports(node: HonestNode, jobs: list[Job], batch: int):  # type: ignore[no-untyped-def]
    """The honest node's reports, one job at a time or in continuous batches of `batch`."""
    from tests.adversarial.harness import receipt_for, run_batched, signed

    if batch <= 1:
        for job in jobs:
            yield job, node.run(job)[0]
        return
    for start in range(0, len(jobs), batch):
        group = jobs[start:start + batch]
        for job, result in zip(group, run_batched(node.engine, node.model_dir, group), strict=True):
            receipt = receipt_for(job, node.identity, MODEL_ID, node.weights_digest, result)
            yield job, signed(receipt, node.identity, result.token_ids)


def decode_jobs(model_dir: Path, jobs: list[Job], out: Path, tensor_parallel: bool, batch: int = 1) -> None:
    """Child mode: run the jobs as an honest node would and write its reports as JSON lines."""
    import mlx.core as mx

    from node_agent.inference.engine import Engine

    group = mx.distributed.init(strict=True, backend="ring") if tensor_parallel else None
    node = HonestNode(Engine(tensor_group=group), model_dir)
    rank = group.rank() if group is not None else 0
    with out.with_suffix(f".rank{rank}").open("w") as handle:
        for job, report in _reports(node, jobs, batch):
            handle.write(json.dumps({"job": asdict(job), "streamed": report.streamed,
                                     "body": report.body.hex(), "signature": report.signature.hex(),
                                     "public_key": node.identity.public_key_raw.hex()}) + "\n")
        handle.write(json.dumps({"done": True}) + "\n")


def _run_child(model_dir: Path, jobs_file: Path, out: Path, mode: str) -> list[dict]:
    command = [sys.executable, __file__, "--decode", str(model_dir), "--jobs-file", str(jobs_file),
               "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    ranks = 1
    if mode.startswith("openblas"):
        threads = mode.removeprefix("openblas").removeprefix("-").removesuffix("-threads") or "1"
        env.update(LD_PRELOAD=str(OPENBLAS), OPENBLAS_CORETYPE="SkylakeX", OPENBLAS_NUM_THREADS=threads)
    if mode.startswith("batch-"):
        command += ["--batch", mode.removeprefix("batch-")]
    if mode == "tensor-parallel":
        ranks = 2
        launcher = Path(sys.executable).with_name("mlx.launch")
        command = [str(launcher), "-n", "2", "--backend", "ring", "--", sys.executable, *command[1:],
                   "--tensor-parallel"]
    subprocess.run(command, env=env, check=True, timeout=1800)
    results = []
    for rank in range(ranks):  # mlx.launch exits 0 even when a rank fails: read every rank
        lines = [json.loads(line) for line in out.with_suffix(f".rank{rank}").read_text().splitlines()]
        if not lines or lines[-1] != {"done": True}:
            raise RuntimeError(f"{mode} rank {rank} did not finish; see its output above")
        results.append(lines[:-1])
    def proof(lines: list[dict]) -> list[tuple]:
        return [(line["streamed"], decode_receipt(bytes.fromhex(line["body"])).activation_commitment)
                for line in lines]

    if any(proof(other) != proof(results[0]) for other in results[1:]):
        raise RuntimeError(f"{mode}: the ranks disagree on tokens or commitments")
    return results[0]


def measure(coordinator: Coordinator, reports: list[dict]) -> dict[str, object]:
    """Per job: its worst chunk's count of positions off by more than t units; failed token checks."""
    over: dict[int, list[int]] = {t: [] for t in THRESHOLDS}
    chunks = 0
    bad_tokens = []
    for line in reports:
        job, streamed = Job(**line["job"]), tuple(line["streamed"])
        receipt = decode_receipt(bytes.fromhex(line["body"]))
        commitment = decode_commitment(receipt.activation_commitment)
        check = make_token_check(streamed, receipt.finish_reason,
                                 Sampling(job.temperature, job.top_p, job.seed),
                                 coordinator.replayer.end_token_ids(MODEL_ID), DEFAULT_TOLERANCES)
        replay = coordinator.replayer.replay(MODEL_ID, job.prompt, streamed, check)
        mine = (replay.prompt, *replay.generated)
        worst = {t: 0 for t in THRESHOLDS}
        for number, (chunk, candidates) in enumerate(zip(commitment.chunks, mine)):
            differences = value_differences(chunk, candidates, chunk_key(job.job_id, number))
            chunks += 1
            for t in THRESHOLDS:
                worst[t] = max(worst[t], int((differences > t).sum()))
        for t in THRESHOLDS:
            over[t].append(worst[t])
        bad_tokens.append(sum(not c.ok for c in replay.token_checks))
    return {"chunks": chunks, "over": over, "bad_tokens": bad_tokens}


def _print_row(name: str, stats: dict, honest: bool) -> None:
    over = stats["over"]
    pick = max if honest else min  # the hardest job: most mismatches if honest, fewest if a cheat
    cells = " ".join(f"{pick(over[t]):>6}" for t in THRESHOLDS)
    jobs = len(stats["bad_tokens"])
    token_jobs = sum(b > 0 for b in stats["bad_tokens"])
    print(f"{name:<28} {stats['chunks']:>6} {cells}   {token_jobs:>4}/{jobs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--decode", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--jobs-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tensor-parallel", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--modes", default=",".join(HONEST_MODES),
                        help="comma-separated honest set-ups (default: all of " + ", ".join(HONEST_MODES) + ")")
    parser.add_argument("--no-cheats", action="store_true", help="skip the cheating models' rows")
    args = parser.parse_args()
    if args.decode is not None:
        jobs = [Job(**j) for j in json.loads(args.jobs_file.read_text())]
        decode_jobs(args.decode, jobs, args.out, args.tensor_parallel, args.batch)
        return
    with tempfile.TemporaryDirectory() as scratch:
        run(args, Path(args.work_dir or scratch))


def run(args: argparse.Namespace, work: Path) -> None:
    from node_agent.inference.engine import Engine
    from node_agent.tiny_model import build_tiny_model
    from tests.adversarial.models import build_cheat_models

    honest_dir = build_tiny_model(work / "honest")
    cheats = {} if args.no_cheats else build_cheat_models(honest_dir, work / "cheats")
    jobs = varied_jobs(args.jobs, seed=2024, max_tokens_max=args.max_tokens)
    jobs_file = work / "jobs.json"
    jobs_file.write_text(json.dumps([asdict(j) for j in jobs]))
    coordinator = Coordinator(Engine(), honest_dir)
    modes = [m for m in args.modes.split(",") if m and (not m.startswith("openblas") or OPENBLAS.exists())]
    unknown = set(modes) - set(HONEST_MODES)
    assert not unknown, f"unknown --modes {sorted(unknown)}"
    judged: dict[str, tuple[int, list[str]]] = {}
    print(f"{len(jobs)} jobs, up to {args.max_tokens} tokens; a cell is, over the jobs, the "
          f"hardest case of a job's worst chunk: how many of its top_k committed values are off "
          f"by more than t units (top_k {TOP_K}, commitment version {COMMITMENT_VERSION})")
    print(f"{'set-up':<28} {'chunks':>6} " + " ".join(f"{'t=' + str(t):>6}" for t in THRESHOLDS)
          + "   jobs with bad tokens")
    for mode in modes:
        reports = _run_child(honest_dir, jobs_file, work / f"honest-{mode}.jsonl", mode)
        _print_row(f"honest, {mode}", measure(coordinator, reports), honest=True)
        judged[mode] = false_rejections(coordinator, reports)
    for name, cheat_dir in cheats.items():
        reports = _run_child(cheat_dir, jobs_file, work / f"cheat-{name}.jsonl", "bundled-blas")
        _print_row(f"cheat, {name}", measure(coordinator, reports), honest=False)
    print("honest rows: the most any job showed (must stay under the allowance); cheat rows: "
          "the fewest any job showed (must exceed it).")
    print(f"current tolerances: {DEFAULT_TOLERANCES}")
    total = sum(count for count, _ in judged.values())
    rejected = [reason for _, reasons in judged.values() for reason in reasons]
    print(f"\nfalse rejections (door and replay, current tolerances): {len(rejected)} of {total} honest "
          "checked jobs; " + ", ".join(f"{mode} {len(r)}/{n}" for mode, (n, r) in judged.items()))
    for reason in rejected[:10]:
        print(f"  rejected: {reason}")


@dataclass(frozen=True)
class _Assigned:
    """The node a job was assigned to, as the door knows it: its id and public key."""

    node_id: str
    public_key_raw: bytes


def false_rejections(coordinator: Coordinator, reports: list[dict]) -> tuple[int, list[str]]:
    """Each honest job through the coordinator's whole check; (jobs, why each rejected one was)."""
    from contracts.ids import node_id_from_public_key
    from tests.adversarial.harness import Report

    rejected = []
    for line in reports:
        key = bytes.fromhex(line["public_key"])
        report = Report(tuple(line["streamed"]), bytes.fromhex(line["body"]), bytes.fromhex(line["signature"]))
        outcome = coordinator.judge(Job(**line["job"]), _Assigned(node_id_from_public_key(key), key),  # type: ignore[arg-type]
                                    report)
        if outcome.caught:
            rejected.append(f"{line['job']['job_id']} at {outcome.stage}: {'; '.join(outcome.reasons)[:200]}")
    return len(reports), rejected


if __name__ == "__main__":
    main()
