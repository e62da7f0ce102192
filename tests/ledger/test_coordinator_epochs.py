"""coordinator/money/epochs.py over a migrated coordinator database: Ultra-seat availability from signed
heartbeats, closing the due epoch, anchoring it, and the `mlxnet ledger` commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.ids import JobId, NodeId, OperatorId
from contracts.lending import Heartbeat, LendingMode, LendingState
from coordinator.model import NodeRecord
from coordinator.money.epochs import EpochSettings, anchor_closed_epochs, close_due_epoch
from coordinator.storage import node_rows
from coordinator.storage.database import Database, upgrade_schema
from ledger import epochs, jobs
from ledger.storage import epoch_store
from ledger.anchor import PayoutChain
from ledger.policy import price_job
from mlxnet import cli
from node_agent.hardware import simulated_profile

LENGTH_S = 60
EPOCH = 29_000_000  # a minute in 2025
START_MS = EPOCH * LENGTH_S * 1_000
SETTINGS = EpochSettings(length_s=LENGTH_S, heartbeat_credit_ms=10_000)
ULTRA = NodeId("node-" + "u" * 24)


def add_seat(db: Database, heartbeat_every_ms: int) -> None:
    lending = LendingState(mode=LendingMode.ULTRA_SEAT)
    node = NodeRecord(ULTRA, b"k" * 32, OperatorId("carol"), "studio", simulated_profile("m3-ultra-512"), (), 1,
                      START_MS, START_MS, lending)
    with db.transaction() as session:
        node_rows.save_node(session, node, "0" * 64)
        for sent_ms in range(START_MS, START_MS + LENGTH_S * 1_000, heartbeat_every_ms):
            beat = Heartbeat(ULTRA, sent_ms, 0, lending)
            assert node_rows.insert_signed_heartbeat(session, beat, sent_ms, b"s" * 64)
        price = price_job(8 * 10**9, 100, 100)
        assert jobs.credit_operator_for_job(session, JobId("job-c"), OperatorId("carol"), price,
                                            now_us=START_MS * 1_000 + 5).ok
        assert epochs.set_payout_address(session, "carol", "0x" + "c3" * 20) is not None


@pytest.fixture
def db(database_url: str) -> Database:
    upgrade_schema(database_url)
    database = Database(database_url)
    yield database
    database.dispose()


@pytest.mark.parametrize("every_ms, qualified", [(5_000, True), (20_000, False)])
def test_seat_availability_comes_from_signed_heartbeats(db: Database, every_ms: int, qualified: bool) -> None:
    add_seat(db, every_ms)
    end_us = (START_MS + LENGTH_S * 1_000) * 1_000
    result = close_due_epoch(db, SETTINGS, now_us=end_us + 1)
    assert result is not None and result.ok and result.epoch is not None and result.epoch.number == EPOCH
    with db.transaction() as session:
        (seat,) = epoch_store.seat_outcomes(session, EPOCH)
    assert seat.node_id == ULTRA and seat.qualified is qualified
    assert seat.availability_bps == (10_000 if qualified else 5_000)
    assert close_due_epoch(db, SETTINGS, now_us=end_us + 2) is None


def test_close_anchor_statement_and_verify_with_the_cli(db: Database, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    add_seat(db, 5_000)
    close_due_epoch(db, SETTINGS, now_us=(START_MS + LENGTH_S * 1_000) * 1_000 + 1)
    chain = PayoutChain.in_process()
    assert anchor_closed_epochs(db, chain) == 1
    url = db.url
    # The test credited job-c by hand, with no job or receipt behind it: the audit must say so.
    assert cli.main(["ledger", "audit", "--database-url", url]) == 1
    assert "DIFFERENCE [credit] job-c:credit: credit for job job-c has no verified receipt" in capsys.readouterr().out
    assert cli.main(["ledger", "statement", "--database-url", url, "--operator", "carol",
                     "--epoch", str(EPOCH), "--json"]) == 0
    statement = json.loads(capsys.readouterr().out)
    assert statement["seats"][0]["qualified"] and statement["proof"]["epoch"] == EPOCH
    assert cli.main(["ledger", "statement", "--database-url", url, "--operator", "carol", "--epoch", str(EPOCH)]) == 0
    assert "qualified: availability 100.00%" in capsys.readouterr().out
    assert cli.main(["ledger", "set-payout-address", "--database-url", url, "--operator", "x",
                     "--address", "nope"]) == 2
    with db.transaction() as session:
        bundle = statement["proof"]
        assert chain.verify(bundle["epoch"], bundle["address"], int(bundle["amount"]),
                            [bytes.fromhex(p[2:]) for p in bundle["proof"]])
        assert epoch_store.last_epoch(session) is not None
