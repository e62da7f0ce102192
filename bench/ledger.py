"""Ledger benchmark: job payments per second, audit speed, and gas per anchor and claim.

    .venv/bin/python -m bench.ledger [--jobs 10000 --batch-jobs 500 --audit-transfers 1000000 --leaves 1000]

- Job payments (reserve, post with a held credit and the fee, release: five transfers a
  job), on SQLite and on PostgreSQL (skipped with the reason when unreachable): one job per
  transaction through ledger.api.reserve_job and its twins, and batched through reserve_jobs (--batch-jobs
  jobs per transaction and phase, each phase one ledger call).
- Audit: writes --audit-transfers hash-chained transfers straight into SQLite (and PostgreSQL),
  then times ledger.api.audit over them.
- The start-up heap is frozen out of the garbage collector first, as the coordinator's
  serve does (--no-gc-freeze to leave it in).
- Gas: deploys the contracts on the in-process chain and on a real anvil process (when
  installed), publishes one epoch root over --leaves payouts and claims a few, printing the
  gas each used and the anchor's time to a mined receipt; on anvil, also an operator's own
  check of one payout in an epoch of 100,000 (--gas-only: just these).
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, insert, text, update
from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger import api as ledger
from ledger.api import JobCompletion, JobReservation, Transfer, TransferKind, TransferState, max_job_charge, price_job
from ledger.chain import GENESIS_HASH, linked  # the audit's input is forged straight into the tables
from ledger.storage import tables

POSTGRES_URL = os.environ.get("MLXNET_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
PARAMETERS = 8 * 10**9
PRICE = price_job(PARAMETERS, 500, 200)
RESERVE = max_job_charge(PARAMETERS, 500, 256)
CONSUMER = ConsumerId("bench-consumer")
OPERATOR = OperatorId("bench-operator")
INSERT_CHUNK = 5_000


@contextmanager
def engines() -> Iterator[list[tuple[str, Engine]]]:
    directory = tempfile.TemporaryDirectory()
    found = [("sqlite", create_engine(f"sqlite:///{Path(directory.name) / 'bench.db'}"))]
    schema = f"ledger_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        found.append(("postgresql", create_engine(POSTGRES_URL, connect_args={"options": f"-csearch_path={schema}"})))
    except Exception as error:  # noqa: BLE001 - a benchmark reports any reason PostgreSQL is missing
        print(f"postgresql skipped: {str(error).splitlines()[0]}")
        schema = ""
    try:
        yield found
    finally:
        for _, engine in found:
            engine.dispose()
        if schema:
            with admin.connect() as connection:
                connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
        directory.cleanup()


def _fresh(engine: Engine) -> None:
    ledger.metadata.drop_all(engine)
    ledger.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        ledger.open_consumer_account(session, CONSUMER)
        ledger.open_operator_account(session, OPERATOR)
        ledger.deposit_for_consumer(session, "bench-deposit", CONSUMER, 10**17)
        ledger.ensure_system_accounts(session)


def payments_one_per_transaction(engine: Engine, count: int) -> float:
    _fresh(engine)
    started = time.perf_counter()
    for index in range(count):
        job = JobId(f"job-single-{index}")
        with Session(engine) as session, session.begin():
            assert ledger.reserve_job(session, job, CONSUMER, RESERVE).ok
        with Session(engine) as session, session.begin():
            assert ledger.complete_job(session, job, CONSUMER, OPERATOR, PRICE, hold_s=3_600).ok
        with Session(engine) as session, session.begin():
            assert ledger.release_job_credit(session, job).ok
    return count / (time.perf_counter() - started)


def payments_batched(engine: Engine, count: int, batch_jobs: int) -> tuple[float, float]:
    """(jobs per second, this process's CPU microseconds per job): the CPU figure holds on a shared machine."""
    _fresh(engine)
    started, cpu_started = time.perf_counter(), time.process_time()
    for first in range(0, count, batch_jobs):
        job_ids = [JobId(f"job-batch-{index}") for index in range(first, min(count, first + batch_jobs))]
        # Each phase commits on its own, as the coordinator would: reserve at submit, complete
        # at the receipt, release when the check window closes; each is one ledger call.
        with Session(engine) as session, session.begin():
            reserved = ledger.reserve_jobs(session, [JobReservation(job, CONSUMER, RESERVE) for job in job_ids])
            assert all(result.ok for result in reserved), reserved[0]
        with Session(engine) as session, session.begin():
            completions = [JobCompletion(job, CONSUMER, OPERATOR, PRICE) for job in job_ids]
            completed = ledger.complete_jobs(session, completions, hold_s=3_600)
            assert all(payment.ok for payment in completed), completed[0]
        with Session(engine) as session, session.begin():
            released = ledger.release_job_credits(session, job_ids)
            assert all(payment.ok and payment.results for payment in released), released[0]
    return count / (time.perf_counter() - started), (time.process_time() - cpu_started) * 1e6 / count


def write_transfers(engine: Engine, count: int) -> None:
    """count posted transfers in a valid hash chain, written straight to the tables."""
    tables.metadata.drop_all(engine)
    tables.metadata.create_all(engine)
    accounts = ["bench:a", "bench:b", "bench:c"]
    with Session(engine) as session, session.begin():
        session.execute(insert(tables.accounts), [dict(
            id=account, kind="external", debits_must_not_exceed_credits=False, created_at_us=1, debits_pending=0,
            debits_posted=0, credits_pending=0, credits_posted=0) for account in accounts])
    prev_hash, balances = GENESIS_HASH, {a: [0, 0] for a in accounts}
    rows: list[dict[str, object]] = []
    columns = [column.name for column in tables.transfers.columns]
    for sequence in range(1, count + 1):
        debit, credit = accounts[sequence % 3], accounts[(sequence + 1) % 3]
        draft = Transfer(0, f"t{sequence}", debit, credit, sequence % 997 + 1, TransferState.POSTED, None, 0, None,
                         TransferKind.CORRECTION, None, 1_000_000 + sequence, "", "")
        transfer = linked(draft, sequence, prev_hash)
        prev_hash = transfer.hash
        balances[debit][0] += transfer.amount
        balances[credit][1] += transfer.amount
        row = {name: getattr(transfer, name) for name in columns}
        row["state"], row["kind"] = str(transfer.state), str(transfer.kind)
        rows.append(row)
        if len(rows) == INSERT_CHUNK or sequence == count:
            with Session(engine) as session, session.begin():
                session.execute(insert(tables.transfers), rows)
            rows = []
    with Session(engine) as session, session.begin():
        for account, (debits, credits) in balances.items():
            session.execute(update(tables.accounts).where(tables.accounts.c.id == account)
                            .values(debits_posted=debits, credits_posted=credits))
        session.execute(update(tables.chain_head).values(last_sequence=count, last_transfer_id=f"t{count}",
                                                          last_hash=prev_hash))


def audit_speed(engine: Engine, count: int) -> tuple[float, float]:
    """(transfers per second, this process's CPU microseconds per transfer)."""
    write_transfers(engine, count)
    with Session(engine) as session:
        started, cpu_started = time.perf_counter(), time.process_time()
        report = ledger.audit(session)
        elapsed, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    assert report.ok and report.transfers_checked == count, report.differences[:3]
    return count / elapsed, cpu_s * 1e6 / count


def gas(leaves: int) -> None:
    _gas_on("in-process chain", ledger.in_process_chain(), leaves)
    if ledger.anvil_binary() is None:
        print("anvil: skipped (no binary; `make anvil` installs it)")
        return
    with tempfile.TemporaryDirectory() as directory:
        process, chain = ledger.embedded_chain(Path(directory))
        try:
            _gas_on("anvil", chain, leaves)
            _self_check(chain, SELF_CHECK_LEAVES)
        finally:
            process.stop()


SELF_CHECK_LEAVES = 100_000
SELF_CHECKS = 20


def _self_check(chain: ledger.PayoutChainLike, leaves: int) -> None:
    """An operator's own check of a payout in an epoch of `leaves` payouts: the proof bundle's
    root recomputed, then the root read from the chain and the contract's verify, over JSON-RPC."""
    tree = ledger.build_tree([ledger.PayoutLeaf(2, "0x" + f"{index + 1:040x}", 10**9 + index)
                              for index in range(leaves)])
    chain.publish(2, tree.root, tree.total, b"\x02" * 32)
    leaf = tree.leaves[leaves // 2]
    bundle = {"format": "mlxnet-payout-proof-v1", "epoch": 2, "address": leaf.address, "amount": str(leaf.amount),
              "proof": ["0x" + sibling.hex() for sibling in tree.proof(leaf)], "root": "0x" + tree.root.hex()}
    started = time.perf_counter()
    for _ in range(SELF_CHECKS):
        parsed, proof, _ = ledger.leaf_from_bundle(bundle)
        assert ledger.bundle_root(bundle) == chain.epoch_root(2)
        assert chain.verify(2, parsed.address, parsed.amount, proof)  # type: ignore[attr-defined]
    took_ms = (time.perf_counter() - started) * 1e3 / SELF_CHECKS
    print(f"operator self-check (proof bundle -> root -> root and verify on chain), epoch of {leaves:,} payouts,"
          f" {len(proof)}-hash proof: {took_ms:.1f} ms")


def _gas_on(name: str, chain: ledger.PayoutChainLike, leaves: int) -> None:
    """Gas of one epoch anchor over `leaves` payouts and of five claims, and the anchor's wall time
    (sent to mined with one confirmation: anvil mines each transaction at once)."""
    leaves_list = [ledger.PayoutLeaf(1, "0x" + f"{index + 1:040x}", 10**9 + index) for index in range(leaves)]
    tree = ledger.build_tree(leaves_list)
    started = time.perf_counter()
    anchor = chain.publish(1, tree.root, tree.total, b"\x01" * 32)  # any head digest
    anchor_ms = (time.perf_counter() - started) * 1e3
    print(f"gas on {name}: epoch anchor (publishEpoch, {leaves} payouts): {anchor.gas_used}"
          f" ({anchor_ms:.1f} ms to a mined receipt)")
    claims = [chain.claim(1, leaf.address, leaf.amount, tree.proof(leaf)).gas_used  # type: ignore[attr-defined]
              for leaf in tree.leaves[:5]]
    depth = len(tree.proof(tree.leaves[0]))
    print(f"gas on {name}: claim with a {depth}-hash proof: first {claims[0]}, then {claims[1:]}"
          f" (mean {sum(claims) // 5})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)  # enough batches that the first, warming up, does not dominate
    parser.add_argument("--batch-jobs", type=int, default=500, help="jobs per transaction and phase")
    parser.add_argument("--audit-transfers", type=int, default=1_000_000)
    parser.add_argument("--leaves", type=int, default=1_000)
    parser.add_argument("--gas-only", action="store_true", help="only the gas figures (in-process and anvil)")
    parser.add_argument("--no-gc-freeze", action="store_true",
                        help="leave the start-up heap to the collector (the coordinator freezes it when it serves)")
    args = parser.parse_args()
    assert args.batch_jobs >= 1
    if args.gas_only:
        gas(args.leaves)
        return
    with engines() as found:
        if not args.no_gc_freeze:
            # As coordinator.server.serve does once started: full collections, which the
            # batches trigger every few calls, stop walking the ~60k start-up objects again.
            gc.collect()
            gc.freeze()
        print(f"start-up heap {'left to' if args.no_gc_freeze else 'frozen out of'} the garbage collector")
        for name, engine in found:
            single = payments_one_per_transaction(engine, max(1, args.jobs // 10))
            print(f"{name}: job payments, one job per transaction: {single:,.0f}/s")
            batched, cpu_us = payments_batched(engine, args.jobs, args.batch_jobs)
            print(f"{name}: job payments, {args.batch_jobs} jobs per transaction: {batched:,.0f}/s"
                  f" (client CPU {cpu_us:.0f} us a job)")
        for name, engine in found:
            rate, cpu_us = audit_speed(engine, args.audit_transfers)
            print(f"{name}: audit over {args.audit_transfers:,} transfers: {rate:,.0f} transfers/s"
                  f" (client CPU {cpu_us:.2f} us a transfer)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (2 cores shared: compare the CPU figures)")
    gas(args.leaves)


if __name__ == "__main__":
    main()
