"""Proof-of-completion figures: proof size, verification cost, detection and false rejections.

    .venv/bin/python bench/verify.py [--jobs 30] [--max-tokens 128] [--blas bundled,openblas]

For each BLAS (each in its own process: OpenBLAS is preloaded into a child when
/usr/lib/x86_64-linux-gnu/openblas-pthread is present), it runs the same honest jobs on
the project's tiny model, timing each job's generation (the node: decoding while
recording and committing to its hidden states) and then its verification (the
coordinator's verifier: one replay pass, token checks and commitment comparison),
one after the other on this machine. It prints:

- proof size: activation-commitment bytes per generated token;
- verification time / generation time, per job (median, worst) and over all jobs;
- the projected network-wide overhead: check rate x that ratio, at the default
  TrustPolicy's steady-state rate and over a new node's first jobs;
- detection per cheat (tests/adversarial/cheats.py) and false rejections, with counts;
- the policy (issue 32, `--policy-only` prints just this part): the expected profit of a
  cheat over f (the work it saves) and p (its detection per check) for the default
  TrustPolicy, worst case over node paces and job sizes; and, per cheat kind, its measured
  detection per check run through the real policy (check_rate_for_job, trust updates, the
  node's stake and pace): cheated jobs until caught, and the cheater's profit, by simulation.
- checkers (`--policy-only` too): the check fee the stake policy sets, an honest checker's
  profit per check, and a lazy checker's (one that answers "matches" without replaying) expected
  profit per answer against what it has at stake, with planted checks at economics.planted_rate;
  and, by simulation, how many checks a checker lazy on every check answers before it is caught;
- checks by peers (issue 32): CPU seconds of a peer's check (its replay, encoding and signing:
  node_agent/peer_checks.py) and of the coordinator's judging of it (no model), against the
  generation they check; peer-check cost as a share of network compute at the default
  TrustPolicy; bytes per token of the proof and of a peer's signed result;
- proof bytes per token at fewer committed values: which cheat jobs the seeded tokens alone
  catch (zero proof bytes), and, for the rest, the share of committed values each cheat put
  off. Top-64 (commitment version 2, what nodes make) is measured; top-32/16 are estimated
  from it (marked as estimates).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts.commitments import COMMITMENT_VERSION, TOP_K, chunk_bytes  # noqa: E402
from coordinator.verification.economics import (  # noqa: E402
    BASIS_POINTS, Cheater, Exposure, check_rate_for_job, checker_at_stake, checker_fee_bps, checker_profit,
    expected_profit, forfeit, planted_rate, replay_cost,
)
from coordinator.verification.policy import TrustPolicy, TrustRecord, check_rate  # noqa: E402
from coordinator.verification.tolerances import DEFAULT_TOLERANCES  # noqa: E402
from ledger.api import network_fee_floor  # noqa: E402

OPENBLAS = Path(os.environ.get("MLXNET_OPENBLAS", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"))
WARMUP_JOBS = 2


def time_jobs(model_dir: Path, count: int, max_tokens: int) -> list[dict]:
    """Honest jobs, each generated then verified; returns per-job timings and sizes."""
    from node_agent.inference.engine import Engine
    from tests.adversarial.harness import Coordinator, HonestNode, varied_jobs

    engine = Engine()
    node, checks = HonestNode(engine, model_dir), Coordinator(engine, model_dir)
    jobs = varied_jobs(count + WARMUP_JOBS, seed=99, max_tokens_max=max_tokens, words_max=40)
    rows = []
    for number, job in enumerate(jobs):
        job = dataclasses.replace(job, max_tokens=max(job.max_tokens, max_tokens // 2))
        started = time.perf_counter()
        report, result = node.run(job)
        generated = time.perf_counter()
        outcome = checks.judge(job, node.identity, report)
        verified = time.perf_counter()
        if number < WARMUP_JOBS:
            continue
        rows.append({"tokens": len(result.token_ids), "prompt_tokens": result.prompt_tokens,
                     "proof_bytes": len(result.activation_commitment),
                     "generate_s": generated - started, "verify_s": verified - generated,
                     "rejected": outcome.caught, "reasons": list(outcome.reasons)})
    return rows


def _run_child(mode: str, model_dir: Path, args: argparse.Namespace, out: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if mode == "openblas":
        env.update(LD_PRELOAD=str(OPENBLAS), OPENBLAS_CORETYPE="SkylakeX", OPENBLAS_NUM_THREADS="1")
    subprocess.run([sys.executable, __file__, "--child", str(model_dir), "--out", str(out),
                    "--jobs", str(args.jobs), "--max-tokens", str(args.max_tokens)],
                   env=env, check=True, timeout=3600)
    return json.loads(out.read_text())


def _report_timing(mode: str, rows: list[dict]) -> float:
    ratios = [r["verify_s"] / r["generate_s"] for r in rows]
    generated = sum(r["generate_s"] for r in rows)
    verified = sum(r["verify_s"] for r in rows)
    tokens = sum(r["tokens"] for r in rows)
    proof = sum(r["proof_bytes"] for r in rows)
    print(f"\n[{mode} BLAS] {len(rows)} honest jobs, {tokens} generated tokens "
          f"({statistics.mean(r['prompt_tokens'] for r in rows):.0f} prompt tokens on average)")
    print(f"  proof size: {proof / tokens:.2f} bytes per generated token "
          f"({proof} bytes; commitment version {COMMITMENT_VERSION}: {chunk_bytes(COMMITMENT_VERSION)} per "
          f"32-token chunk plus the prompt's chunk and a 7-byte header; version 1 was 257)")
    print(f"  generation {generated:.2f}s ({tokens / generated:.0f} tokens/s), verification "
          f"{verified:.2f}s")
    print(f"  verification / generation: median {statistics.median(ratios):.3f}, worst "
          f"{max(ratios):.3f}, over all jobs {verified / generated:.3f}")
    print(f"  false rejections: {sum(r['rejected'] for r in rows)} of {len(rows)}")
    return verified / generated


def _report_projection(ratios: dict[str, float]) -> None:
    policy = TrustPolicy()
    first = [check_rate(TrustRecord(passed, 0), policy) for passed in range(100)]
    print("\nprojected network-wide verification overhead (check rate x verification/generation):")
    print(f"  default policy: a new node's first {policy.new_node_checks} jobs all checked; "
          f"{sum(first) / len(first):.3f} of its first 100; steady state {policy.rate_min:.3f}")
    for mode, ratio in ratios.items():
        print(f"  [{mode}] steady state {policy.rate_min * ratio * 100:.2f}% of network compute; "
              f"over a new node's first 100 jobs {sum(first) / len(first) * ratio * 100:.2f}%")


def _report_peer_checks(model_dir: Path, count: int, max_tokens: int) -> None:
    """A peer's check of honest jobs, timed in CPU seconds (this process only, bundled BLAS)."""
    from contracts.peer_checks import CheckJob, decode_result
    from contracts.receipts import decode_receipt
    from contracts.token_checks import TokenSlack
    from coordinator.verification.judge import ReplayFacts, judge
    from coordinator.verification.tolerances import DEFAULT_TOLERANCES as TOLERANCES
    from node_agent.inference.engine import Engine
    from node_agent.peer_checks import run_check
    from tests.adversarial.harness import HonestNode, new_identity, varied_jobs

    engine, checker = Engine(), new_identity()
    node = HonestNode(engine, model_dir)
    jobs = varied_jobs(count + WARMUP_JOBS, seed=77, max_tokens_max=max_tokens, words_max=40)
    generate_s = replay_s = judge_s = 0.0
    tokens = proof_bytes = result_bytes = rejected = 0
    for number, job in enumerate(jobs):
        job = dataclasses.replace(job, max_tokens=max(job.max_tokens, max_tokens // 2))
        started = time.process_time()
        report, result = node.run(job)
        generated = time.process_time()
        receipt = decode_receipt(report.body)
        check = CheckJob(f"pc-{job.job_id}", job.job_id, receipt.model_id, receipt.weights_digest, job.prompt,
                         report.streamed, receipt.finish_reason, job.temperature, job.top_p, job.seed,
                         TokenSlack(TOLERANCES.logit_slack, TOLERANCES.mass_slack))
        body, _ = run_check(engine, str(model_dir), check, checker)
        replayed = time.process_time()
        peer = decode_result(body)
        verdict = judge(receipt, ReplayFacts(peer.prompt_tokens, peer.prompt, peer.generated, peer.token_checks),
                        TOLERANCES)
        judged = time.process_time()
        if number < WARMUP_JOBS:
            continue
        generate_s, replay_s, judge_s = (generate_s + generated - started, replay_s + replayed - generated,
                                         judge_s + judged - replayed)
        tokens += len(result.token_ids)
        proof_bytes, result_bytes = proof_bytes + len(result.activation_commitment), result_bytes + len(body)
        rejected += not verdict.passed
    policy = TrustPolicy()
    first = [check_rate(TrustRecord(passed, 0), policy) for passed in range(100)]
    ratio = (replay_s + judge_s) / generate_s
    print(f"\nchecks by peers, {count} honest jobs ({tokens} tokens), CPU seconds (bundled BLAS):")
    print(f"  generation {generate_s:.2f}s; the peer's check {replay_s:.2f}s (replay, encode, sign); "
          f"the coordinator judging it {judge_s:.3f}s (no model)")
    print(f"  a peer check costs {ratio:.3f} of the generation it checks "
          f"(the coordinator's share: {judge_s / generate_s:.4f})")
    print(f"  peer-check cost as a share of network compute at the default policy: steady state "
          f"(rate {policy.rate_min}) {policy.rate_min * ratio * 100:.2f}%; over a new node's first 100 jobs "
          f"{sum(first) / len(first) * ratio * 100:.2f}%; a dispute adds one more replay (a referee), "
          f"none among honest jobs here")
    print(f"  proof: {proof_bytes / tokens:.2f} bytes per token in the receipt; a peer's signed result "
          f"{result_bytes / tokens:.1f} bytes per token (node -> coordinator, never stored on chain)")
    print(f"  honest jobs rejected by a peer's check: {rejected} of {count}")


def _caught_at(outcome, values: int) -> bool:  # type: ignore[no-untyped-def]
    """Whether a cheat job is still caught if each chunk committed `values` values, not TOP_K.

    Caught by its tokens or counts: unchanged (no proof bytes). Caught only by its activations: estimated
    from the measured share of values each failing chunk put off, against the per-chunk
    mismatch limit scaled to `values` (4 of 64 -> 2 of 32)."""
    if outcome.stage != "replay" or outcome.verdict is None:
        return outcome.caught
    if any("committed activations differ" not in r for r in outcome.verdict.reasons):
        return True  # its tokens, its end or its counts give it away: no committed value needed
    limit = -(-DEFAULT_TOLERANCES.mismatches_allowed(COMMITMENT_VERSION) * values // TOP_K)
    return any(c.mismatched / c.compared * values > limit for c in outcome.verdict.chunks if c.compared)


def _report_detection(per_job: int) -> dict[str, float]:
    from node_agent.inference.engine import Engine
    from node_agent.tiny_model import build_tiny_model
    from tests.adversarial.cheats import CHEAT_JOBS, CHEATS, CheatContext
    from tests.adversarial.harness import Coordinator, HonestNode, new_identity
    from tests.adversarial.models import build_cheat_models

    with tempfile.TemporaryDirectory() as scratch:
        honest = build_tiny_model(Path(scratch) / "honest")
        engine = Engine()
        checks = Coordinator(engine, honest)
        context = CheatContext(engine, honest, build_cheat_models(honest, Path(scratch) / "cheats"),
                               new_identity(), HonestNode(engine, honest), checks.spec.weights_digest)
        jobs = CHEAT_JOBS[:per_job]
        print(f"\ndetection, {len(jobs)} jobs per cheat (greedy and sampled, 8 to 40 tokens):")
        total = caught_total = 0
        detection = {}
        every: list = []
        for name, cheat in CHEATS.items():
            outcomes = [checks.judge(job, context.cheater, cheat(context, job)) for job in jobs]
            every += outcomes
            caught = sum(o.caught for o in outcomes)
            stages = sorted({o.stage for o in outcomes if o.caught})
            total, caught_total = total + len(jobs), caught_total + caught
            detection[name] = caught / len(jobs)
            print(f"  {name:<40} caught {caught}/{len(jobs)}  at {', '.join(stages)}")
        print(f"  all cheats: {caught_total}/{total} caught "
              f"({100 * caught_total / total:.1f}%)")
        replayed = [o for o in every if o.stage == "replay"]
        by_tokens = sum(_caught_at(o, 0) for o in replayed)
        print(f"\nproof bytes per token at fewer committed values ({len(replayed)} cheat jobs caught by replay; "
              f"{by_tokens} of them by the seeded tokens and the counts alone, at zero proof bytes):")
        for values in (TOP_K, TOP_K // 2, TOP_K // 4):
            per_token = (1 + 2 * values) / 32
            caught = sum(_caught_at(o, values) for o in every)
            print(f"  top-{values:<3} {per_token:5.2f} bytes/token (plus the prompt's chunk): caught "
                  f"{caught}/{len(every)}" + (f" (measured: commitment version {COMMITMENT_VERSION})"
                                              if values == TOP_K else " (estimate)"))
        fewest = min((c.mismatched for o in replayed if o.verdict is not None for c in o.verdict.chunks
                      if not c.ok), default=None)
        print(f"  the fewest of {TOP_K} committed values a failing chunk put off: {fewest} (a chunk fails above "
              f"{DEFAULT_TOLERANCES.mismatches_allowed(COMMITMENT_VERSION)})")

    return detection


# --- the policy: expected profit and jobs until caught (issue 32) --------------------------

PROFIT_F = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0)
PROFIT_P = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
PACES = (0.5, 1, 3, 10, 30, 100, 1_000, 10_000)  # jobs per check window
JOB_SIZES = (0.1, 1, 10, 100)  # the cheated job's credit over the node's average


def _report_expected_profit() -> None:
    """The inequality of coordinator/verification/economics.py, evaluated for the default policy."""
    policy = TrustPolicy()
    stake = policy.stake
    print(f"\nexpected profit of one cheated job, in credits of that job, default policy "
          f"(p_min {stake.detection_min}, kappa {stake.work_cost_share_max}, stake share "
          f"{stake.stake_share}, window floor {stake.checks_per_window_min:g} checks):")
    print("  worst case over node paces " + ", ".join(f"{p:g}" for p in PACES) + " jobs/window, "
          "cheated-job sizes " + ", ".join(f"{s:g}" for s in JOB_SIZES) + "x, trusted (rate_min)")
    print("  f \\ p  " + "".join(f"{p:>9}" for p in PROFIT_P))
    for f in PROFIT_F:
        cells = []
        for p in PROFIT_P:
            worst = max(expected_profit(f, p, stake, Cheater(pace, policy.rate_min, size)).per_cheat
                        / (Cheater(pace, policy.rate_min, size).credit * size)
                        for pace in PACES for size in JOB_SIZES)
            cells.append(f"{worst:+9.3f}")
        print(f"  {f:<6}" + "".join(cells))
    print(f"  (negative everywhere for p >= p_min = {stake.detection_min}; the columns below it show "
          "what the policy does not promise)")
    print("  the check rate a trusted node's average job gets, by pace (jobs/window): " + ", ".join(
        f"{pace:g}: {expected_profit(1.0, 1.0, stake, Cheater(pace, policy.rate_min)).check_rate:.3f}"
        for pace in PACES))


STAKES_IN_CREDITS = (0, 0.25, 0.5, 1, 2, 5, 10, 100)  # what a checker has at stake, in checked-job credits


def _report_checker_economics(trials: int) -> None:
    """Checkers (economics.py): the fee, an honest checker's margin, and what laziness earns."""
    stake = TrustPolicy().stake
    credit = 1_000_000
    bps = checker_fee_bps(stake)
    network_bps = BASIS_POINTS * network_fee_floor(credit) // credit
    print(f"\ncheckers, default policy: fee {bps / 100:g}% of the checked job's credit (fee_margin "
          f"{stake.fee_margin} x (1 + planted_per_check_max {stake.planted_per_check_max}) x check_cost_share "
          f"{stake.check_cost_share} x kappa {stake.work_cost_share_max}), paid from the job's network fee "
          f"({network_bps / 100:g}% of its credit) and capped at it; planted checks per real one: "
          f"{stake.planted_share_min}..{stake.planted_per_check_max}")
    print("  a lazy answer's expected profit over an honest one: C - q x (S + fee), S what it has at stake, "
          "fee the check's own (held: not paid once caught)")
    print("  at stake S (job credits)  planted r   honest profit/check   lazy: caught q   lazy profit/answer"
          "   (in job credits)")
    for at_stake in STAKES_IN_CREDITS:
        found = checker_profit(credit, round(at_stake * credit), stake)
        print(f"  {at_stake:>24g}  {found.planted_rate:>9.3f}   {found.honest / credit:>+19.3f}"
              f"   {found.lazy_caught:>14.3f}   {found.lazy / credit:>+18.4f}")
    rng = random.Random(32)
    for held in (0, 1, 10):
        caught, profits = _lazy_checks_until_caught(stake, held, rng, trials)
        caught.sort()
        print(f"  a checker lazy on every check, {held:g} job credits held: caught after mean "
              f"{statistics.mean(caught):.1f} checks (p95 {caught[int(0.95 * len(caught))]}, max {caught[-1]}); "
              f"profit over honest checking {statistics.mean(profits):+.2f} job credits")


def _lazy_checks_until_caught(stake, held: float, rng: random.Random, trials: int,  # type: ignore[no-untyped-def]
                              checks_max: int = 10_000) -> tuple[list[int], list[float]]:
    """A checker that answers "matches" to every check, through planted_rate: its stake is its fees
    so far (all taken back when caught) plus `held` job credits; each real check brings a planted one
    with probability r. Caught on the first planted one, it still answers the real check that came with
    it, unpaid (a fee paid before the catch is taken back, one after it withheld). Per trial: checks
    answered until caught, and its profit over an honest checker answering the same checks (honest:
    every real check's fee less every replay; lazy: its stake lost, every fee gone)."""
    credit = 1_000
    held_units = round(held * credit)
    fee = credit * checker_fee_bps(stake) // 10_000
    cost = replay_cost(credit, stake)
    caught_after, profits = [], []
    for _ in range(trials):
        fees, real, answered = 0, 0, 0
        while answered < checks_max:
            rate = planted_rate(credit, checker_at_stake(fees, held_units, 0, stake), stake)
            planted = rng.random() < rate
            real, answered = real + 1, answered + 1 + planted
            if planted:
                break
            fees += fee
        lazy = -forfeit(held_units, stake)  # every fee taken back or withheld, the stake voided
        honest = fee * real - cost * answered
        caught_after.append(answered)
        profits.append((lazy - honest) / credit)
    return caught_after, profits


def _jobs_until_caught(detection: float, pace: float, honest_checks: int, rng: random.Random,
                       trials: int, jobs_max: int = 20_000) -> tuple[list[int], list[float]]:
    """A node that cheats on every job from its steady state on (its last window's jobs held),
    through the real policy: each job's check rate from its trust record and its stake, a draw decides
    the check, the cheat's measured detection decides the catch. Per trial: cheated jobs until
    caught, and the cheater's profit over honest work (credits: kappa per job saved, the
    caught job's credit and the stake voided lost)."""
    policy = TrustPolicy()
    stake = policy.stake
    caught_after, profits = [], []
    for _ in range(trials):
        record = TrustRecord(honest_checks, 0)
        others = max(0, math.ceil(pace) - 1)
        for job in range(1, jobs_max + 1):
            exposure = Exposure(1_000, others * 1_000, others)
            rate = check_rate_for_job(check_rate(record, policy), exposure, stake)
            if rng.random() < rate:
                if rng.random() < detection:
                    caught_after.append(job)
                    lost = 1 + math.ceil(others * stake.stake_share)
                    profits.append(job * stake.work_cost_share_max - lost)
                    break
                record = record.after(True)
        else:
            caught_after.append(jobs_max)
            profits.append(jobs_max * stake.work_cost_share_max)
    return caught_after, profits


def _report_jobs_until_caught(detection: dict[str, float], trials: int) -> None:
    rng = random.Random(32)
    scenarios = (("new node, 10 jobs/window", 10, 0), ("trusted (150 checks), 1 job/window", 1, 150),
                 ("trusted (150 checks), 10 jobs/window", 10, 150),
                 ("trusted (150 checks), 1000 jobs/window", 1_000, 150))
    print(f"\ncheated jobs until caught through the real policy (every job cheated; {trials} runs "
          "each; detection per check as measured above; profit in job credits, kappa per cheated job):")
    for name, p in detection.items():
        cells = []
        for label, pace, honest in scenarios:
            if p == 0:
                cells.append(f"{label}: never caught")
                continue
            caught, profit = _jobs_until_caught(p, pace, honest, rng, trials)
            caught.sort()
            cells.append(f"{label}: mean {statistics.mean(caught):.1f}, p95 {caught[int(0.95 * len(caught))]}"
                         f", profit {statistics.mean(profit):+.1f}")
        print(f"  {name:<40} p={p:.2f}\n    " + "\n    ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--blas", default="bundled,openblas", help="comma-separated: bundled, openblas")
    parser.add_argument("--cheat-jobs", type=int, default=6, help="jobs per cheat (at most 6)")
    parser.add_argument("--peer-jobs", type=int, default=20, help="honest jobs checked by a peer")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--policy-only", action="store_true",
                        help="print only the policy's figures (expected profit, jobs until caught)")
    parser.add_argument("--trials", type=int, default=400, help="simulated runs per cheat and scenario")
    args = parser.parse_args()
    if args.child is not None:
        args.out.write_text(json.dumps(time_jobs(args.child, args.jobs, args.max_tokens)))
        return
    from node_agent.tiny_model import build_tiny_model

    if args.policy_only:
        _report_expected_profit()
        _report_checker_economics(args.trials)
        _report_jobs_until_caught(_report_detection(args.cheat_jobs), args.trials)
        return
    modes = [m for m in args.blas.split(",") if m != "openblas" or OPENBLAS.exists()]
    ratios = {}
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = build_tiny_model(Path(scratch) / "tiny")
        print(f"tiny model (3.1M parameters, float32) on this CPU; jobs up to {args.max_tokens} "
              f"tokens, prompts up to 40 words; generation then verification of each job in turn")
        for mode in modes:
            rows = _run_child(mode, model_dir, args, Path(scratch) / f"{mode}.json")
            ratios[mode] = _report_timing(mode, rows)
        if args.peer_jobs:
            _report_peer_checks(model_dir, args.peer_jobs, args.max_tokens)
    _report_projection(ratios)
    _report_expected_profit()
    _report_checker_economics(args.trials)
    _report_jobs_until_caught(_report_detection(args.cheat_jobs), args.trials)


if __name__ == "__main__":
    main()
