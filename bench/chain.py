"""Payout chain benchmark on a real anvil process: gas per epoch anchor and per claim, time from an
epoch's close to its root anchored (1 confirmation), and an operator's full self-check of one payout
in an epoch of 100,000 payouts (statement -> proof -> root on chain).

    python -m bench.chain [--payouts 100000] [--epochs 10]

The ledger is SQLite in a temporary directory; anvil is the project's (`make anvil`). Wall times
are noisy on a shared machine: each figure gives this process's CPU time beside it (anvil's own
CPU is not counted: it is another process, as a real chain is).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Engine, create_engine, insert
from sqlalchemy.orm import Session

from contracts.ids import JobId, OperatorId
from ledger import api as ledger
from ledger.storage import tables  # the set-up's accounts go straight into the tables

T = TypeVar("T")
LENGTH_S = 60
FIRST_EPOCH = 29_000_000  # a minute in 2025: every close is in the past
PRICE = ledger.price_job(8 * 10**9, 100, 100)
SELF_CHECKS = 20
CLAIMS = 5


@dataclass(frozen=True)
class Timed:
    wall_ms: float
    cpu_ms: float


def timed(work: Callable[[], T]) -> tuple[T, Timed]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, Timed((time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3)


@contextmanager
def transaction(engine: Engine) -> Iterator[Session]:
    with Session(engine) as session, session.begin():
        yield session


def open_operators(engine: Engine, operators: list[str], at_us: int) -> None:
    """Operator accounts and payout addresses written straight into the tables (set-up, not measured:
    one ensure_account and one set_payout_address per operator would take minutes for 100,000)."""
    with transaction(engine) as session:
        session.execute(insert(tables.accounts), [
            {"id": f"operator:{operator}", "kind": str(ledger.AccountKind.OPERATOR),
             "debits_must_not_exceed_credits": True, "created_at_us": at_us, "debits_pending": 0,
             "debits_posted": 0, "credits_pending": 0, "credits_posted": 0} for operator in operators])
        session.execute(insert(tables.payout_addresses), [
            {"operator_id": operator, "address": address_of(operator), "updated_at_us": at_us}
            for operator in operators])


def pay_operators(engine: Engine, number: int, operators: list[str]) -> None:
    """One posted job credit for each operator inside epoch `number`, and a payout address each."""
    at_us = (number * LENGTH_S + 1) * 1_000_000
    open_operators(engine, operators, at_us)
    batch = ledger.JOBS_PER_CALL_MAX
    for start in range(0, len(operators), batch):
        chunk = operators[start:start + batch]
        job_ids = [JobId(f"job-{number}-{operator}") for operator in chunk]
        with transaction(engine) as session:
            completions = [ledger.JobCompletion(job_id, None, OperatorId(operator), PRICE)
                           for job_id, operator in zip(job_ids, chunk, strict=True)]
            assert all(p.ok for p in ledger.complete_jobs(session, completions, hold_s=3600, now_us=at_us))
            assert all(p.ok for p in ledger.release_job_credits(session, job_ids, now_us=at_us + 2_000_000))


def address_of(operator: str) -> str:
    return "0x" + f"{int(operator.removeprefix('op')) + 1:040x}"


def close(engine: Engine, number: int) -> ledger.EpochRecord:
    with transaction(engine) as session:
        result = ledger.close_epoch(session, number, length_s=LENGTH_S,
                                    now_us=((number + 1) * LENGTH_S + 1) * 1_000_000)
    assert result.ok and result.epoch is not None and result.epoch.root is not None, result
    return result.epoch


def anchor(engine: Engine, chain: ledger.PayoutChainLike) -> list[ledger.AnchorRecord]:
    with transaction(engine) as session:
        return ledger.anchor_pass(session, chain, confirmations=1).anchored


def close_to_anchored(engine: Engine, chain: ledger.PayoutChainLike, epochs: int) -> None:
    """Epochs of three payouts each, closed then anchored as the coordinator's epochs loop does in one pass."""
    times, gas = [], []
    for index in range(epochs):
        number = FIRST_EPOCH + 2 * index
        pay_operators(engine, number, [f"op{index * 3 + k}" for k in range(3)])
        close(engine, number)
        anchored, took = timed(lambda: anchor(engine, chain))
        assert [a.epoch for a in anchored] == [number]
        times.append(took)
        gas.append(anchored[0].gas_used)
    walls = sorted(t.wall_ms for t in times)
    print(f"epoch close -> root anchored (1 confirmation, anvil mining at once), {epochs} epochs: "
          f"median {statistics.median(walls):.1f} ms, max {walls[-1]:.1f} ms wall; "
          f"{statistics.mean(t.cpu_ms for t in times):.1f} ms CPU a pass in this process")
    print(f"gas per epoch anchor (publishEpoch: root, total, record digest): {statistics.mean(gas):,.0f} "
          f"(min {min(gas):,}, max {max(gas):,})")


def claims(engine: Engine, chain_for: Callable[[str], ledger.PayoutChainLike], number: int,
           operators: list[str]) -> None:
    gas = []
    for operator in operators:
        with transaction(engine) as session:
            statement = ledger.operator_statement(session, operator, number)
        assert statement is not None and statement.proof is not None
        leaf, proof, _ = ledger.leaf_from_bundle(statement.proof)
        chain = chain_for(operator)
        gas.append(chain.claim(leaf.epoch, leaf.address, leaf.amount, proof).gas_used)  # type: ignore[attr-defined]
        try:
            chain.claim(leaf.epoch, leaf.address, leaf.amount, proof)  # type: ignore[attr-defined]
            raise AssertionError("a second claim went through")
        except ledger.ChainError:
            pass
    print(f"gas per claim ({len(proof)}-hash proof, mints MLX to the leaf's address): first {gas[0]:,}, "
          f"mean {statistics.mean(gas):,.0f} over {len(gas)}; each second claim refused")


def self_check(engine: Engine, chain: ledger.PayoutChainLike, payouts: int) -> None:
    number = FIRST_EPOCH + 1_000
    operators = [f"op{1_000_000 + index}" for index in range(payouts)]  # apart from the earlier epochs' operators
    _, setup = timed(lambda: pay_operators(engine, number, operators))
    epoch, closing = timed(lambda: close(engine, number))
    (anchored,), anchoring = timed(lambda: anchor(engine, chain))
    print(f"epoch of {payouts:,} payouts: credits written in {setup.wall_ms / 1e3:.1f} s; close (sweep + tree) "
          f"{closing.wall_ms:,.0f} ms wall / {closing.cpu_ms:,.0f} ms CPU; anchored in {anchoring.wall_ms:.0f} ms, "
          f"gas {anchored.gas_used:,} (the same as for 3 payouts: only the root goes on chain)")
    operator = operators[payouts // 2]

    def statement() -> str:  # what `mlxnet ledger statement --operator X --epoch N --json` reads and proves
        with transaction(engine) as session:
            found = ledger.operator_statement(session, operator, number)
        assert found is not None and found.proof is not None
        return json.dumps(found.proof)

    document, coordinator = timed(statement)

    def verify() -> bool:  # what `mlxnet ledger verify-proof` does: no call to the coordinator
        bundle = json.loads(document)
        leaf, proof, _ = ledger.leaf_from_bundle(bundle)
        return (ledger.bundle_root(bundle) == chain.epoch_root(leaf.epoch)
                and chain.verify(leaf.epoch, leaf.address, leaf.amount, proof))  # type: ignore[attr-defined]

    checks = [timed(verify) for _ in range(SELF_CHECKS)]
    assert all(ok for ok, _ in checks) and epoch.leaf_count == payouts
    wall = statistics.median(t.wall_ms for _, t in checks)
    cpu = statistics.mean(t.cpu_ms for _, t in checks)
    depth = len(json.loads(document)["proof"])
    print(f"operator self-check in an epoch of {payouts:,} payouts ({depth}-hash proof):\n"
          f"  statement with its proof (coordinator's database, {payouts:,} payouts read, tree rebuilt): "
          f"{coordinator.wall_ms:,.0f} ms wall / {coordinator.cpu_ms:,.0f} ms CPU\n"
          f"  proof -> root -> root on chain and the contract's verify (2 RPC calls): "
          f"median {wall:.1f} ms wall / {cpu:.2f} ms CPU over {SELF_CHECKS}\n"
          f"  total: {coordinator.wall_ms + wall:,.0f} ms wall")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payouts", type=int, default=100_000, help="payouts in the self-check's epoch")
    parser.add_argument("--epochs", type=int, default=10, help="epochs closed and anchored for the latency")
    args = parser.parse_args()
    assert args.payouts >= 2 and args.epochs >= 1
    if ledger.anvil_binary() is None:
        raise SystemExit("needs anvil: `make anvil` installs @foundry-rs/anvil into .tools/")
    with tempfile.TemporaryDirectory(prefix="bench-chain-") as directory:
        engine = create_engine(f"sqlite:///{Path(directory) / 'ledger.db'}")
        ledger.metadata.create_all(engine)
        process, chain = ledger.embedded_chain(Path(directory) / "anvil")
        try:
            close_to_anchored(engine, chain, args.epochs)
            record = json.loads((Path(directory) / "anvil" / "contracts.json").read_text())
            keys = dict(zip([f"op{k}" for k in range(3)], _dev_keys(), strict=True))
            claims(engine, lambda operator: ledger.connect_chain(process.rpc_url, record["distributor"],
                                                                 keys[operator]),
                   FIRST_EPOCH, list(keys))
            self_check(engine, chain, args.payouts)
        finally:
            process.stop()
            engine.dispose()


def _dev_keys() -> list[str]:
    """Anvil's development accounts 1-3 send the claims (any account may claim for a leaf)."""
    from mlxnet.demo_chain import PAYOUT_KEYS

    return list(PAYOUT_KEYS.values())


if __name__ == "__main__":
    main()
