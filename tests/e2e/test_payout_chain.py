"""A real coordinator process anchoring on its own anvil: killed with SIGKILL, its anvil goes too;
started again, the same chain state is back, every anchored root is still on chain as recorded,
and MLX World's operator page reads the roots from the chain (a real anvil, no node agents)."""

from __future__ import annotations

import json
import os
import select
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select as sql_select

from contracts.ids import JobId, OperatorId
from coordinator.storage.database import Database, default_sqlite_url, upgrade_schema
from coordinator.world import operator_keys
from ledger import epochs, jobs
from ledger.anchor import PayoutChain
from ledger.anchoring import check_anchors
from ledger.anvil import anvil_binary
from ledger.policy import price_job
from ledger.storage import tables
from mlxnet.processes import Child, start_coordinator

pytestmark = pytest.mark.e2e

EPOCH_LENGTH_S = "2"  # an epoch closes every 2 s, and its root is anchored at once
EVENT_WAIT_S = 120.0
ADDRESSES = {"alice": "0x" + "a1" * 20, "bob": "0x" + "b2" * 20, "carol": "0x" + "c3" * 20}


def _credit(database_url: str, operator: str) -> None:
    """Work paid to the operator now: the next epoch to close has a root paying them."""
    db = Database(database_url)
    try:
        with db.transaction() as session:
            job = JobId(f"job-{operator}-{time.time_ns()}")
            assert jobs.credit_operator_for_job(session, job, OperatorId(operator), price_job(8 * 10**9, 100, 100)).ok
            epochs.set_payout_address(session, operator, ADDRESSES[operator])
    finally:
        db.dispose()


def _wait_anchored(coordinator: Child, count: int) -> None:
    """Until MLX World's event stream says `count` roots are anchored (no polling: the stream pushes)."""
    context = ssl.create_default_context(cafile=coordinator.extra["certificate"])
    deadline = time.monotonic() + EVENT_WAIT_S
    with urllib.request.urlopen(f"{coordinator.extra['url']}/world/api/events", context=context,
                                timeout=EVENT_WAIT_S) as stream:
        event = ""
        while time.monotonic() < deadline:
            line = stream.readline().decode().strip()
            if line.startswith("event:"):
                event = line.removeprefix("event:").strip()
            elif line.startswith("data:") and event == "epoch":
                if json.loads(line.removeprefix("data:"))["anchored"] >= count:
                    return
    raise AssertionError(f"fewer than {count} roots anchored within {EVENT_WAIT_S:.0f} s")


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _anvil_processes(coordinator_pid: int) -> list[int]:
    """The coordinator's anvil watchdog and anvil itself (by their command lines)."""
    found = []
    for child in _children(coordinator_pid):
        command = Path(f"/proc/{child}/cmdline").read_bytes()
        if b"anvil_watchdog" in command:
            found += [child, *_children(child)]
    return found


def _program(pid: int) -> str:
    return Path(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()).name


def _wait_exit(pid: int, timeout_s: float) -> bool:
    try:
        descriptor = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([descriptor], [], [], timeout_s)[0])
    finally:
        os.close(descriptor)


def _anchors(database_url: str) -> dict[int, tuple[str, str, int]]:
    db = Database(database_url)
    try:
        with db.transaction() as session:
            rows = session.execute(sql_select(tables.epoch_anchors)).all()
            return {row.epoch: (row.root, row.tx_hash, row.block_number) for row in rows}
    finally:
        db.dispose()


@pytest.fixture
def work_dir(tmp_path: Path) -> Iterator[Path]:
    if anvil_binary() is None:
        pytest.fail("the payout chain's e2e tests need anvil: `make anvil` installs @foundry-rs/anvil into .tools/")
    if not hasattr(os, "pidfd_open"):
        pytest.skip("this test watches anvil exit through a pidfd (Linux)")
    yield tmp_path


def test_a_sigkilled_coordinator_takes_its_anvil_and_a_restart_finds_every_root(work_dir: Path) -> None:
    database_url = default_sqlite_url(work_dir / "coordinator")
    (work_dir / "coordinator").mkdir(mode=0o700)
    upgrade_schema(database_url)
    _credit(database_url, "alice")
    env = {"MLXNET_EPOCH_LENGTH_S": EPOCH_LENGTH_S}
    coordinator = start_coordinator(work_dir, env=env)
    try:
        _wait_anchored(coordinator, 1)
        _credit(database_url, "bob")
        _wait_anchored(coordinator, 2)
        before = _anchors(database_url)
        anvil = _anvil_processes(coordinator.process.pid)
        assert len(anvil) == 2, "the coordinator runs anvil under its watchdog"
        assert _program(anvil[1]) == "anvil"  # the binary itself, not a wrapper that could outlive it
    finally:
        coordinator.kill()  # SIGKILL: the coordinator cleans nothing up
    assert all(_wait_exit(pid, 60) for pid in anvil), "anvil outlived the coordinator"

    coordinator = start_coordinator(work_dir, env=env)
    try:
        _credit(database_url, "carol")
        _wait_anchored(coordinator, len(before) + 1)
        after = _anchors(database_url)
        # Every root anchored before the crash is recorded as it was: nothing was re-published.
        assert {epoch: after[epoch] for epoch in before} == before
        record = json.loads((work_dir / "coordinator" / "anvil" / "contracts.json").read_text())
        chain = PayoutChain.connect(record["rpc_url"], record["distributor"])
        for epoch, (root, tx_hash, _) in after.items():
            assert chain.epoch_root(epoch) == bytes.fromhex(root[2:])
            published = chain.publication(epoch)
            assert published is not None and published.tx_hash == tx_hash
        db = Database(database_url)
        try:
            with db.transaction() as session:  # the audit's anchor check: every closed root, as on chain
                assert check_anchors(session, chain) == []
        finally:
            db.dispose()
        _operator_page_reads_the_chain(coordinator, database_url, chain, after)
    finally:
        coordinator.stop()


def _operator_page_reads_the_chain(coordinator: Child, database_url: str, chain: PayoutChain,
                                   anchors: dict[int, tuple[str, str, int]]) -> None:
    """Alice's epochs list and proof, over HTTP: each root as the chain holds it, matching the ledger."""
    db = Database(database_url)
    try:
        with db.transaction() as session:
            _, key = operator_keys.create_operator_key(session, "alice", "e2e", int(time.time() * 1000))
    finally:
        db.dispose()
    context = ssl.create_default_context(cafile=coordinator.extra["certificate"])

    def get(path: str) -> dict[str, object]:
        request = urllib.request.Request(f"{coordinator.extra['url']}/world/api{path}",
                                         headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request, context=context, timeout=60) as response:
            return json.loads(response.read())

    closed = [item for item in get("/operator/epochs")["epochs"] if item["closed"] and item["root"]]  # type: ignore[index]
    assert closed and all(item["chain"]["check"] == "matches" and item["chain"]["chain_id"] == chain.chain_id
                          for item in closed)
    paid = next(item for item in closed if item["payout"])
    proof = get(f"/operator/proofs/{paid['epoch']}")
    assert (proof["root_source"], proof["chain_check"]) == ("chain", "matches")
    assert proof["root"] == anchors[paid["epoch"]][0] == proof["ledger_root"]
