"""`mlxnet demo`: the whole network on one machine, end to end.

It builds the tiny model, starts a coordinator on SQLite and three node
agents as separate processes declaring different simulated Macs, submits a
handful of jobs at once, and shows where each ran and why, its text, its
verified receipt, the coordinator's replay check of its proof, and what each
operator was credited once the checks passed. Then an epoch closes, its payouts'
root is anchored on the coordinator's own anvil, and one operator's payout is
checked against the chain and claimed, with the commands to do it by hand.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from contracts.tls import CoordinatorTrust
from mlxnet.checks_view import render_check, wait_for_checks
from mlxnet.consumer import JobClient, StreamedTokens
from mlxnet.demo_chain import EPOCH_LENGTH_S, set_payout_addresses, show_verification, wait_for_anchored_payout
from mlxnet.explain_view import render_explanation
from mlxnet.processes import Child, start_coordinator, start_nodes
from mlxnet.receipt_view import check_receipt_locally
from protos.mlxnet.v1 import job_pb2

MODEL_ID = "mlxnet/tiny-llama"
NODES = (  # name, simulated Mac, operator
    ("mac-mini", "m4-pro-64", "alice"),
    ("studio-max", "m4-max-128", "bob"),
    ("studio-ultra", "m3-ultra-512", "carol"),
)
PROMPTS = (
    "In the beginning God created",
    "And the earth was",
    "And God said, Let there be",
    "And Abraham",
    "And the LORD said unto",
)
MAX_TOKENS = 48


@dataclass(frozen=True)
class DemoResult:
    prompt: str
    job: job_pb2.Job
    token_ids: tuple[int, ...]
    seconds: float


def _run_job(address: str, trust: CoordinatorTrust, prompt: str) -> DemoResult:
    started = time.perf_counter()
    with JobClient(address, consumer="demo", trust=trust) as client:
        job = client.submit(MODEL_ID, prompt, max_tokens=MAX_TOKENS)
        token_ids: list[int] = []
        final = job
        for item in client.stream(job.job_id):
            if isinstance(item, StreamedTokens):
                token_ids.extend(item.token_ids)
            else:
                final = item
    return DemoResult(prompt, final, tuple(token_ids), time.perf_counter() - started)


def _show(result: DemoResult, names: dict[str, str], out) -> bool:  # type: ignore[no-untyped-def]
    job = result.job
    where = ", ".join(f"{names.get(n, n)} ({chip})" for n, chip in zip(job.node_ids, job.chips))
    out.write(f"\n── {job.job_id}  →  {where or 'nowhere'}\n")
    out.write(render_explanation(job.placement_explanation_json, names) + "\n")
    out.write(f"  prompt: {result.prompt!r}\n  output: {job.text!r}\n")
    if job.error:
        out.write(f"  FAILED: {job.error}\n")
        return False
    check = check_receipt_locally(job.receipt.body, job.receipt.signature, job.signer_public_key,
                                  result.prompt, result.token_ids)
    verdict = "verified" if check.ok else "REJECTED " + "; ".join(check.problems)
    out.write(f"  receipt {verdict}; {job.prompt_tokens}+{job.completion_tokens} tokens in "
              f"{result.seconds:.2f}s; {job.credited_base_units} base units held for the operator "
              f"until the proof is checked\n")
    return check.ok


def _show_balances(database_url: str, operators: list[str], out) -> dict[str, int]:  # type: ignore[no-untyped-def]
    from contracts.ids import OperatorId
    from coordinator.storage.database import Database
    from ledger.api import balance, format_mlx, operator_account_id

    db = Database(database_url)
    out.write("\noperator balances (MLX ledger):\n")
    balances = {}
    with db.transaction() as session:
        for operator in operators:
            found = balance(session, operator_account_id(OperatorId(operator)))
            # Credits earned; each epoch's close sweeps the balance into that epoch's on-chain payout.
            balances[operator] = found.credits_posted if found else 0
            swept = found.debits_posted if found else 0
            out.write(f"  {operator:<8} {format_mlx(balances[operator])} earned, {format_mlx(swept)} of it "
                      "already in a closed epoch's payout\n")
    db.dispose()
    return balances


def _start_fleet(work_dir: Path, model_dir: Path) -> list[Child]:
    # The coordinator runs a verifier worker that replays sampled jobs (all of a new node's).
    # The Macs are simulated, so nothing can measure them: the demo places them by the chips
    # they declare. A real coordinator believes a chip only once the node's benchmark fits it.
    # Epochs of a few seconds, so one closes and its root is anchored on the coordinator's anvil.
    coordinator = start_coordinator(work_dir, allow_anonymous=True, trust_simulated_hardware=True,
                                    verify_models=(f"{MODEL_ID}={model_dir}",),
                                    env={"MLXNET_EPOCH_LENGTH_S": str(EPOCH_LENGTH_S)})
    try:
        nodes = start_nodes(work_dir, coordinator.extra["address"], [
            (name, [f"{MODEL_ID}={model_dir}"], profile, operator)
            for name, profile, operator in NODES], coordinator.trust)
    except BaseException:
        coordinator.stop()
        raise
    return [coordinator, *nodes]


def run(args: argparse.Namespace) -> int:
    from node_agent.tiny_model import build_tiny_model

    out = sys.stdout
    with tempfile.TemporaryDirectory(prefix="mlxnet-demo-") as tmp:
        work_dir = args.work_dir or Path(tmp)
        started = time.perf_counter()
        model_dir = work_dir / "models" / "tiny-llama"
        if not (model_dir / "config.json").exists():
            build_tiny_model(model_dir)
        out.write(f"built {MODEL_ID} in {model_dir} ({time.perf_counter() - started:.1f}s)\n")
        children = _start_fleet(work_dir, model_dir)
        try:
            address, trust = children[0].extra["address"], children[0].trust
            database_url = f"sqlite:///{work_dir / 'coordinator' / 'coordinator.db'}"
            set_payout_addresses(database_url)
            jobs_from_us = time.time_ns() // 1_000
            names = {c.extra["node_id"]: c.name for c in children[1:]}
            out.write(f"coordinator on {address} over TLS, certificate {trust.fingerprint}; "
                      "nodes: " + ", ".join(
                          f"{name} ({profile}, operator {op})" for name, profile, op in NODES) + "\n")
            out.write("each node signed its whole registration over a fresh coordinator nonce and "
                      "proved its operator with the operator's key; the simulated chips are "
                      "placed as declared (--trust-simulated-hardware), and earn no Ultra-seat "
                      "bonus until a benchmark fits them\n")
            with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
                results = list(pool.map(lambda p: _run_job(address, trust, p), PROMPTS))
            all_ok = all([_show(r, names, out) for r in results])
            tokens = sum(len(r.token_ids) for r in results)
            seconds = max(r.seconds for r in results)
            out.write(f"\n{len(results)} jobs, {tokens} tokens in {seconds:.2f}s wall "
                      f"({tokens / seconds:.1f} tokens/s across the fleet)\n")
            completed = [r.job.job_id for r in results if r.job.status == job_pb2.JOB_STATUS_COMPLETED]
            out.write("\nproof of completion (the verifier replays each sampled job in one pass):\n")
            for check in wait_for_checks(database_url, completed):
                out.write(f"  {check.job_id}: {render_check(check)}\n")
            balances = _show_balances(database_url, [op for _, _, op in NODES], out)
            operator = next((op for op, amount in balances.items() if amount > 0), None)
            if operator is None:
                out.write("no operator was paid: nothing to anchor\n")
                all_ok = False
            else:
                payout = wait_for_anchored_payout(children[0], database_url, operator, jobs_from_us)
                all_ok = show_verification(payout, operator, work_dir / "coordinator", out) and all_ok
        finally:
            for child in reversed(children):
                child.stop()
        out.write(f"\ndemo finished in {time.perf_counter() - started:.1f}s; logs in "
                  f"{work_dir / 'logs'}\n")
    return 0 if all_ok else 1
