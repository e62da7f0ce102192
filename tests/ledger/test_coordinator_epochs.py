"""coordinator/money/epochs.py over a migrated coordinator database: Ultra-seat availability from signed
heartbeats, closing the due epoch, anchoring it, and the `mlxnet ledger` commands."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest
from sqlalchemy import insert, text

from contracts.benchmarks import BenchmarkResult
from contracts.ids import JobId, NodeId, OperatorId
from contracts.lending import Heartbeat, LendingMode, LendingState
from coordinator.model import NodeRecord, SpotChallenge
from coordinator.money.epochs import EpochSettings, anchor_closed_epochs, close_due_epoch, close_epochs_forever
from coordinator.nodes.benchmark_check import benchmark_flag
from coordinator.nodes import uptime
from coordinator.storage import challenge_rows, liveness_rows, node_rows
from coordinator.storage.tables import node_heartbeats
from coordinator.storage.database import Database, upgrade_schema
from ledger import epochs, jobs
from ledger.storage import epoch_store
from ledger.anchor import ChainReceipt, PayoutChain
from ledger.errors import ChainError
from ledger.anvil import anvil_binary, embedded_chain
from ledger.policy import price_job
from mlxnet import cli
from node_agent.hardware import simulated_profile

LENGTH_S = 60
EPOCH = 29_000_000  # a minute in 2025
START_MS = EPOCH * LENGTH_S * 1_000
SETTINGS = EpochSettings(length_s=LENGTH_S, heartbeat_credit_ms=10_000)
ULTRA = NodeId("node-" + "u" * 24)


def _uptime_spans(session, beats: list[Heartbeat], credit_ms: int) -> None:  # type: ignore[no-untyped-def]
    """The beats as the coordinator keeps them: aggregated into uptime spans (coordinator/nodes/uptime.py)."""
    spans, span = [], None
    for beat in beats:
        grown = span and uptime.extend(span, beat.lending.mode.value, beat.sent_at_ms, beat.sent_at_ms,
                                       b"s" * 64, credit_ms)
        if not grown:
            spans += [span] if span else []
            grown = uptime.opened(beat.node_id, beat.lending.mode.value, beat.sent_at_ms, beat.sent_at_ms,
                                  b"s" * 64)
        span = grown
    liveness_rows.save_spans(session, [(s, False) for s in [*spans, span] if s])


def _legacy_rows(session, beats: list[Heartbeat]) -> None:  # type: ignore[no-untyped-def]
    """The beats as coordinators before 0017_beats_uptime_spans stored them: one row each."""
    session.execute(insert(node_heartbeats), [dict(
        node_id=b.node_id, sent_at_ms=b.sent_at_ms, received_at_ms=b.sent_at_ms, mode=b.lending.mode.value,
        running_jobs=b.running_jobs, owner_active=b.lending.owner_active,
        accepting_jobs=b.lending.accepting_jobs, memory_cap_bytes=0, signature=b"s" * 64) for b in beats])


def _pass_a_challenge(session, node_id: str) -> None:  # type: ignore[no-untyped-def]
    """A challenge benchmark sent, answered in time and passed by its replay."""
    challenge = SpotChallenge("challenge-seat", node_id, "tiny", "a b c", 7, 300, START_MS, 300.0)
    challenge_rows.add(session, challenge)
    assert challenge_rows.mark_sent(session, challenge.challenge_id, START_MS)
    sent = dataclasses.replace(challenge, sent_at_ms=START_MS)
    assert challenge_rows.await_replay(session, sent, START_MS + 1_000, b"receipt", b"signature", (1,) * 300)
    assert challenge_rows.record_replay(session, sent, None, START_MS + 2_000)


def add_seat(db: Database, heartbeat_every_ms: int, measured: bool = True, proven: bool = True,
             legacy: bool = False) -> None:
    """An Ultra seat; measured: its own benchmark fits the chip (else the chip is only claimed);
    proven: a challenge benchmark's answer also passed the coordinator's replay; legacy: its
    heartbeats are rows stored before uptime spans, which an epoch still reads."""
    lending = LendingState(mode=LendingMode.ULTRA_SEAT)
    node = NodeRecord(ULTRA, b"k" * 32, OperatorId("carol"), "studio", simulated_profile("m3-ultra-512"), (), 1,
                      START_MS, START_MS, lending)
    with db.transaction() as session:
        node_rows.save_node(session, node, "0" * 64)
        if measured:
            fits = BenchmarkResult(memory_bandwidth_gb_s=0.8 * 819, decode_tokens_per_s=300.0,
                                   prefill_tokens_per_s=3000.0, reference_model="tiny",
                                   reference_weights_bytes=12_000_000, measured_at_ms=START_MS,
                                   run_time_ms=1000)
            assert benchmark_flag(node.hardware, fits) is None
            node_rows.save_benchmark(session, ULTRA, fits, START_MS, None)
            if proven:
                _pass_a_challenge(session, ULTRA)
        beats = [Heartbeat(ULTRA, sent_ms, 0, lending)
                 for sent_ms in range(START_MS, START_MS + LENGTH_S * 1_000, heartbeat_every_ms)]
        if legacy:
            _legacy_rows(session, beats)
        else:
            _uptime_spans(session, beats, SETTINGS.heartbeat_credit_ms)
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


@pytest.mark.parametrize("legacy", [False, True], ids=["uptime-spans", "pre-0017-rows"])
@pytest.mark.parametrize("every_ms, qualified", [(5_000, True), (20_000, False)])
def test_seat_availability_comes_from_signed_heartbeats(db: Database, every_ms: int, qualified: bool,
                                                        legacy: bool) -> None:
    add_seat(db, every_ms, legacy=legacy)
    end_us = (START_MS + LENGTH_S * 1_000) * 1_000
    result = close_due_epoch(db, SETTINGS, now_us=end_us + 1)
    assert result is not None and result.ok and result.epoch is not None and result.epoch.number == EPOCH
    with db.transaction() as session:
        (seat,) = epoch_store.seat_outcomes(session, EPOCH)
    assert seat.node_id == ULTRA and seat.qualified is qualified
    assert seat.availability_bps == (10_000 if qualified else 5_000)
    assert close_due_epoch(db, SETTINGS, now_us=end_us + 2) is None


def _seat_after_close(db: Database):  # type: ignore[no-untyped-def]
    """The seat's outcome once the epoch it was online in has closed."""
    end_us = (START_MS + LENGTH_S * 1_000) * 1_000
    result = close_due_epoch(db, SETTINGS, now_us=end_us + 1)
    assert result is not None and result.ok
    with db.transaction() as session:
        (seat,) = epoch_store.seat_outcomes(session, EPOCH)
    return seat


def test_a_claimed_ultra_without_a_fitting_benchmark_earns_no_seat_bonus(db: Database) -> None:
    """Issue 25's fake Ultra: a script claiming an M3 Ultra seat, always online, never measured."""
    add_seat(db, 5_000, measured=False)
    seat = _seat_after_close(db)
    assert seat.availability_bps == 10_000 and not seat.qualified
    assert seat.reason == "no bonus: the chip did not verify as an Ultra"
    assert seat.availability_reward == seat.job_bonus == 0


def test_a_measured_ultra_whose_challenge_never_passed_its_replay_earns_no_seat_bonus(db: Database) -> None:
    """A fake Ultra whose self-reported benchmark fits the chip: the benchmark alone earns nothing."""
    add_seat(db, 5_000, proven=False)
    seat = _seat_after_close(db)
    assert seat.availability_bps == 10_000 and not seat.qualified
    assert seat.availability_reward == seat.job_bonus == 0


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


def test_the_cli_signs_each_close_and_statement_and_the_audit_checks_both(
        db: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_seat(db, 5_000)
    url, data_dir = db.url, tmp_path / "coordinator"
    common = ["--database-url", url, "--data-dir", str(data_dir)]
    assert cli.main(["ledger", "close-epoch", *common]) == 0  # the real clock's due epoch, signed
    assert "epoch close: created" in capsys.readouterr().out
    assert cli.main(["ledger", "key", "--data-dir", str(data_dir)]) == 0
    key = capsys.readouterr().out.strip()
    assert len(bytes.fromhex(key)) == 32 and (data_dir / "ledger_key.pem").stat().st_mode & 0o077 == 0
    assert cli.main(["ledger", "statement", *common, "--operator", "carol", "--signed"]) == 0
    kept = tmp_path / "carol.json"
    kept.write_text(capsys.readouterr().out)
    assert json.loads(kept.read_text())["public_key"] == key
    # job-c's credit has no receipt (exit 1), but the heads and the kept statement hold.
    assert cli.main(["ledger", "audit", *common, "--statement", str(kept)]) == 1
    out = capsys.readouterr().out
    assert f"head signatures: checked against {key}" in out and "kept statements: 1" in out
    assert "[signature]" not in out and "[statement]" not in out
    with db.transaction() as session:
        session.execute(text("UPDATE ledger_epochs SET policy_version = 'forged'"))
    assert cli.main(["ledger", "audit", "--database-url", url, "--coordinator-key", key]) == 1
    assert "DIFFERENCE [signature] epoch" in capsys.readouterr().out


def test_verify_and_claim_with_the_cli_against_a_real_anvil(db: Database, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    if anvil_binary() is None:
        pytest.fail("this test needs anvil: `make anvil` installs @foundry-rs/anvil into .tools/")
    add_seat(db, 5_000)
    close_due_epoch(db, SETTINGS, now_us=(START_MS + LENGTH_S * 1_000) * 1_000 + 1)
    process, chain = embedded_chain(tmp_path / "anvil")
    try:
        assert anchor_closed_epochs(db, chain) == 1
        url, on_chain = db.url, ["--rpc-url", process.rpc_url, "--distributor", chain.distributor_address]
        assert cli.main(["ledger", "statement", "--database-url", url, "--operator", "carol",
                         "--epoch", str(EPOCH), "--json"]) == 0
        kept = tmp_path / "carol.json"
        kept.write_text(capsys.readouterr().out)
        assert cli.main(["ledger", "verify-proof", "--proof", str(kept), *on_chain]) == 0
        assert "proof VERIFIED on chain" in capsys.readouterr().out
        assert cli.main(["ledger", "claim", "--proof", str(kept), *on_chain]) == 0
        amount = json.loads(kept.read_text())["proof"]["amount"]
        assert f"claimed {amount} base units" in capsys.readouterr().out
        assert cli.main(["ledger", "claim", "--proof", str(kept), *on_chain]) == 1  # the second claim
        assert "claim refused" in capsys.readouterr().err
        assert cli.main(["ledger", "audit", "--database-url", url, *on_chain]) == 1  # job-c has no receipt
        out = capsys.readouterr().out
        assert "anchored roots: checked on chain" in out and "[anchor]" not in out
        assert cli.main(["ledger", "chain", "--data-dir", str(tmp_path)]) == 0
        assert chain.distributor_address in capsys.readouterr().out
    finally:
        process.stop()


class FlakyChain:
    """A payout chain that is unreachable for its first publish, then works (a fake: unit test)."""

    chain_id = 1
    distributor_address = "0x" + "d" * 40

    def __init__(self) -> None:
        self.roots: dict[int, bytes] = {}
        self.heads: dict[int, bytes] = {}
        self.failures_left = 1
        self.published = threading.Event()

    def epoch_root(self, epoch: int) -> bytes | None:
        return self.roots.get(epoch)

    def epoch_head(self, epoch: int) -> bytes | None:
        return self.heads.get(epoch)

    def publish(self, epoch: int, root: bytes, total: int, head: bytes) -> ChainReceipt:
        if self.failures_left:
            self.failures_left -= 1
            raise ChainError("the RPC is unreachable")
        self.roots[epoch], self.heads[epoch] = root, head
        self.published.set()
        return ChainReceipt("0x" + "1" * 64, 1, 21_000)

    def publication(self, epoch: int) -> ChainReceipt | None:
        return ChainReceipt("0x" + "1" * 64, 1, 21_000) if epoch in self.roots else None

    def block_number(self) -> int:
        return 1


def test_the_epochs_loop_retries_anchoring_after_an_outage_until_it_lands(db: Database) -> None:
    add_seat(db, 5_000)
    chain, stopping = FlakyChain(), threading.Event()
    settings = EpochSettings(length_s=4, heartbeat_credit_ms=10_000)  # a tick a second
    loop = threading.Thread(target=close_epochs_forever, args=(db, stopping, settings, lambda: chain))
    loop.start()
    try:
        assert chain.published.wait(60), "the anchor never landed after the outage"
    finally:
        stopping.set()
        loop.join()
    assert chain.failures_left == 0
    with db.transaction() as session:
        closed = [epoch for epoch in epoch_store.all_epochs(session) if epoch.root is not None]
        anchored = epoch_store.anchors(session, chain.chain_id, chain.distributor_address)
    assert closed and closed[0].number in anchored


def test_the_epochs_loop_records_an_anchor_only_once_it_has_its_confirmations(db: Database) -> None:
    from coordinator.money.epochs import EpochCloser
    from tests.ledger.test_anchor_confirmations import GrowingChain

    add_seat(db, 5_000)
    chain = GrowingChain()
    closer = EpochCloser(db, EpochSettings(length_s=4, heartbeat_credit_ms=10_000), lambda: chain,
                         confirmations=3)
    closer.step()  # closes the epoch that just ended and publishes its root
    (number,) = chain.sent

    def recorded() -> dict[int, object]:
        with db.transaction() as session:
            return dict(epoch_store.anchors(session, chain.chain_id, chain.distributor_address))

    assert recorded() == {}
    closer.step()  # still one confirmation: looked at again, not sent again
    assert recorded() == {} and chain.sent == [number]
    chain.mine(2)
    closer.step()
    assert list(recorded()) == [number] and chain.sent == [number]
