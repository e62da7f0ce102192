"""Liveness end to end through the service, on SQLite and PostgreSQL: a node stays online under
heartbeats, goes offline when they stop and comes back, while the database is written only on
change. Writes are counted by a hook on the engine, time is a fake clock: nothing is timed."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import event

from contracts.hardware import ChipTier
from contracts.lending import Heartbeat, LendingMode, LendingState, heartbeat_message
from coordinator.live.notifier import Wait, node_topic
from coordinator.model import JobRecord, JobStatus
from coordinator.money.epochs import EpochSettings, gather_seats
from coordinator.nodes.reports import HeartbeatReport
from coordinator.scheduling.fleet_reads import snapshot
from coordinator.service import CoordinatorService
from coordinator.storage import liveness_rows
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import Identity, load_or_create_identity
from tests.coordinator.gateway.service_harness import MODEL, make_service, new_consumer, register_node
from tests.node_registration import register_node as register_signed_node
from tests.node_registration import bind_connection
from node_agent.coordinator_client import NodeStatus

INTERVAL_MS = 1_000
OFFLINE_AFTER_MS = 5_000


class Writes:
    """Rows the service writes, by what they hold, counted at the driver (executemany counts each row)."""

    def __init__(self, service: CoordinatorService) -> None:
        self.node_rows = 0
        self.span_rows = 0
        self.per_beat_rows = 0
        event.listen(service.db.engine, "before_cursor_execute", self._on_statement)

    def _on_statement(self, _conn, _cursor, statement: str, parameters, _context, executemany: bool) -> None:  # type: ignore[no-untyped-def]
        rows = len(parameters) if executemany else 1
        text = " ".join(statement.split()).lower()
        if text.startswith("update nodes"):
            self.node_rows += rows
        elif text.startswith(("insert into node_uptime_spans", "update node_uptime_spans")):
            self.span_rows += rows
        elif text.startswith("insert into node_heartbeats"):
            self.per_beat_rows += rows


def _service(database_url: str) -> CoordinatorService:
    return make_service(database_url, heartbeat_interval_ms=INTERVAL_MS,
                        node_offline_after_ms=OFFLINE_AFTER_MS)


def _background(service: CoordinatorService) -> list[str]:
    """One pass of the liveness and reaper loops, as coordinator.background runs them."""
    service.nodes.flush_liveness()
    return service.nodes.reap_offline()


def _online_to_readers(service: CoordinatorService, node_id: str) -> bool:
    """What every reader of the database (placement, MLX World, other coordinators) sees."""
    with service.db.read_transaction() as session:
        fleet, _ = snapshot(session, service.clock.now_ms(), service.config)
    return next(mac.online for mac in fleet.macs if mac.node_id == node_id)


def _tick(service: CoordinatorService, ms: int = INTERVAL_MS) -> None:
    service.clock.ms += ms  # type: ignore[attr-defined]


def test_online_under_heartbeats_offline_when_they_stop_and_back_written_only_on_change(
        database_url: str, tmp_path: Path) -> None:
    service = _service(database_url)
    try:
        node = register_node(service, load_or_create_identity(tmp_path / "mac.pem"), 4)
        consumer = new_consumer(service, "acme")
        _tick(service, service.config.node_offline_after_ms + 1)  # past the restart grace
        service.nodes.heartbeat(node, 0)  # the agent's first beat: it registered 5 s ago
        writes = Writes(service)

        # Thirty beats: no transaction of their own, no scheduling pass; leases renewed in batches.
        transactions = 0
        for _ in range(30):
            _tick(service)
            begun = service.db.write_transactions_begun + service.db.read_transactions_begun
            service.nodes.heartbeat(node, 0)
            transactions += service.db.write_transactions_begun + service.db.read_transactions_begun - begun
            assert _background(service) == []
            assert _online_to_readers(service, node.node_id)
        assert transactions == 0
        # The lease is renewed once half spent (2.5 s), so every third beat: 10 rows for 30 beats.
        assert 0 < writes.node_rows <= 30 // 2
        assert writes.per_beat_rows == 0 and writes.span_rows == 0  # unsigned beats prove nothing

        # A job is placed on it; then its heartbeats stop.
        job = service.jobs.submit(consumer.submission(), consumer.caller).job
        assert service.jobs.get(job.job_id).job.status is JobStatus.ASSIGNED
        writes.node_rows = 0
        handed_back: list[str] = []
        for _ in range(OFFLINE_AFTER_MS // INTERVAL_MS + 2):
            _tick(service)
            handed_back += _background(service)
        assert handed_back == [job.job_id]  # once
        assert not _online_to_readers(service, node.node_id)
        assert writes.node_rows == 0  # going offline wrote nothing about the node: its lease ran out
        assert service.jobs.get(job.job_id).job.status is JobStatus.QUEUED

        # It comes back: written at once, and the queued job is placed on it again.
        _tick(service)
        service.nodes.heartbeat(node, 0)
        assert writes.node_rows >= 1 and _online_to_readers(service, node.node_id)
        again = service.jobs.get(job.job_id).job
        assert again.status is JobStatus.ASSIGNED and again.node_ids == (node.node_id,)
    finally:
        service.db.dispose()


def test_comebacks_at_the_edge_are_answered_from_memory_and_written_together_by_one_batch(
        database_url: str, tmp_path: Path) -> None:
    """The gRPC edge's path (heartbeat_in_memory): a node coming back opens no transaction; the
    liveness batch it wakes writes every comeback in one, then one scheduling pass places on them."""
    service = _service(database_url)
    try:
        hardware = simulated_profile("m3-ultra-512")
        tokens = [register_signed_node(service, load_or_create_identity(tmp_path / f"mac-{i}.pem"),
                                       hardware, (MODEL,), "alice", max_concurrent_jobs=4)
                  for i in range(3)]
        node_ids = [node_id for node_id, _ in tokens]
        consumer = new_consumer(service, "acme")
        _tick(service, service.config.node_offline_after_ms + 1)  # past the restart grace
        for _, token in tokens:
            service.nodes.heartbeat_in_memory(token, "in-process", HeartbeatReport(0))
        _background(service)
        job = service.jobs.submit(consumer.submission(), consumer.caller).job
        for _ in range(OFFLINE_AFTER_MS // INTERVAL_MS + 2):  # all silent: offline, the job handed back
            _tick(service)
            _background(service)
        assert service.jobs.get(job.job_id).job.status is JobStatus.QUEUED
        assert not any(_online_to_readers(service, node_id) for node_id in node_ids)

        _tick(service)
        writes = Writes(service)
        begun = service.db.write_transactions_begun + service.db.read_transactions_begun
        for _, token in tokens:
            now = service.clock.now_ms()
            assert service.nodes.heartbeat_in_memory(token, "in-process", HeartbeatReport(0)) == now
        assert service.db.write_transactions_begun + service.db.read_transactions_begun == begun
        assert service.nodes.comebacks_queued.is_set() and writes.node_rows == 0

        written = service.db.write_transactions_begun
        service.nodes.flush_liveness()
        assert not service.nodes.comebacks_queued.is_set()
        # One transaction for the three leases, one for the scheduling pass that follows.
        assert service.db.write_transactions_begun == written + 2 and writes.node_rows == 3
        assert all(_online_to_readers(service, node_id) for node_id in node_ids)
        again = service.jobs.get(job.job_id).job
        assert again.status is JobStatus.ASSIGNED and again.node_ids[0] in node_ids
        written = service.db.write_transactions_begun
        assert service.nodes.flush_liveness() == 0  # each comeback written once
        assert service.db.write_transactions_begun == written
    finally:
        service.db.dispose()


def test_the_orphan_sweep_keeps_the_jobs_of_a_node_back_before_its_comeback_is_written(
        database_url: str, tmp_path: Path) -> None:
    """A node another coordinator heard (this process's book does not hold it) goes silent on disk
    and comes back here: until the liveness batch writes its lease, the sweep sees it silent, and
    must not hand back the job it still runs."""
    service = _service(database_url)
    try:
        node_id, token = register_signed_node(service, load_or_create_identity(tmp_path / "mac.pem"),
                                              simulated_profile("m3-ultra-512"), (MODEL,), "alice",
                                              max_concurrent_jobs=4)
        consumer = new_consumer(service, "acme")
        _tick(service, service.config.node_offline_after_ms + 1)  # past the restart grace
        service.nodes.heartbeat_in_memory(token, "in-process", HeartbeatReport(0))
        _background(service)
        job = service.jobs.submit(consumer.submission(), consumer.caller).job
        assert job.status is JobStatus.ASSIGNED and job.node_ids == (node_id,)
        service.nodes.liveness.forget(node_id)  # as if another coordinator had heard it, and died
        sweep_after_ms = max(OFFLINE_AFTER_MS, service.config.orphan_sweep_interval_ms) + 1
        _tick(service, sweep_after_ms)  # the last pass swept: the next one is due again
        assert not _online_to_readers(service, node_id)

        service.notifier.set_relayed(True)  # as among coordinators: the cached session still serves
        now = service.clock.now_ms()
        assert service.nodes.heartbeat_in_memory(token, "in-process", HeartbeatReport(1)) == now
        assert service.nodes.liveness.comebacks_pending() == {node_id}
        assert service.nodes.reap_offline() == []  # the sweep is due, and skips it
        assert service.jobs.get(job.job_id).job.status is JobStatus.ASSIGNED

        _background(service)  # the batch writes the comeback; later sweeps find it online
        assert _online_to_readers(service, node_id) and not service.nodes.liveness.comebacks_pending()
        assert service.jobs.get(job.job_id).job.status is JobStatus.ASSIGNED

        # Without the comeback the same sweep hands the job back: the case above is not vacuous.
        service.nodes.liveness.forget(node_id)
        _tick(service, sweep_after_ms)
        assert job.job_id in service.nodes.reap_offline()
        assert service.jobs.get(job.job_id).job.status is JobStatus.QUEUED
    finally:
        service.db.dispose()


def _signed(identity: Identity, sent_at_ms: int, lending: LendingState) -> HeartbeatReport:
    claim = Heartbeat(identity.node_id, sent_at_ms, 0, lending)
    return HeartbeatReport(0, sent_at_ms, lending, (), None, identity.sign(heartbeat_message(claim)))


def test_ultra_seat_uptime_survives_a_coordinator_crash_as_one_span(database_url: str, tmp_path: Path) -> None:
    """Signed heartbeats become one span row, rewritten now and then, never one row per beat; a
    coordinator killed without its last batch loses no credit when the seat reconnects in time."""
    seat = LendingState(mode=LendingMode.ULTRA_SEAT)
    first = _service(database_url)
    identity = load_or_create_identity(tmp_path / "studio.pem")
    ultra = simulated_profile("m3-ultra-512")
    assert ultra.chip_tier is ChipTier.ULTRA
    _, token = register_signed_node(first, identity, ultra, (MODEL,), "alice", status=NodeStatus(seat))
    node = first.nodes.authenticate(token)
    writes = Writes(first)
    start_ms = first.clock.now_ms()
    for _ in range(20):
        _tick(first)
        first.nodes.heartbeat(node, 0, _signed(identity, first.clock.now_ms(), seat))
        first.nodes.flush_liveness()
    assert writes.per_beat_rows == 0
    assert writes.span_rows <= 1 + 20 // 3  # new, then its end once 2.5 s old: every third beat
    crashed_at_ms = first.clock.now_ms()
    first.db.dispose()  # killed: the beats since the last batch were never written

    again = _service(database_url)
    again.clock.ms = crashed_at_ms + 2 * INTERVAL_MS  # type: ignore[attr-defined]
    again.core.started_at_ms = again.clock.ms  # type: ignore[attr-defined]
    try:
        bind_connection(again, identity, token)  # a new process: the node binds its session anew
        node = again.nodes.authenticate(token)
        for _ in range(10):
            again.nodes.heartbeat(node, 0, _signed(identity, again.clock.now_ms(), seat))
            _tick(again)
        again.nodes.flush_liveness(everything=True)  # a coordinator stopping writes every end
        with again.db.read_transaction() as session:
            spans = liveness_rows.spans(session, identity.node_id, 0, 2**62)
        # Continued across the crash: one span from the first beat to the last. (The count of
        # the beats after the last batch died with the process; what they proved did not.)
        assert len(spans) == 1 and 20 < spans[0].beats <= 30
        assert spans[0].first_received_ms == start_ms + INTERVAL_MS
        assert spans[0].last_received_ms == again.clock.now_ms() - INTERVAL_MS
        # The seat was online throughout: the epoch's availability says 100%.
        settings = EpochSettings(length_s=10, heartbeat_credit_ms=OFFLINE_AFTER_MS)
        number = (start_ms + 15_000) // 10_000  # an epoch within the seat's uptime, crash included
        with again.db.read_transaction() as session:
            seats = gather_seats(session, number, settings)
        assert [(s.node_id, s.availability_bps) for s in seats] == [(identity.node_id, 10_000)]
    finally:
        again.db.dispose()


def test_node_streams_read_nothing_while_relayed_and_one_sweep_wakes_those_with_unsent_work(
        database_url: str, tmp_path: Path) -> None:
    service = _service(database_url)
    try:
        service.notifier.set_relayed(True)  # as server.py does on SQLite, and on PostgreSQL with the relay up
        node = register_node(service, load_or_create_identity(tmp_path / "mac.pem"), 4)
        steps = service.nodes.assignment_steps(node)
        wait = next(steps)
        assert isinstance(wait, Wait) and wait.timeout_s is None  # no poll: news only
        reads = service.db.read_transactions_begun
        assert service.nodes.sweep_streams() == 0  # nothing unsent anywhere
        assert service.db.read_transactions_begun == reads + 1  # one read for the whole process

        consumer = new_consumer(service, "acme")
        job = service.jobs.submit(consumer.submission(), consumer.caller).job
        seen = service.notifier.version(node_topic(node.node_id))
        assert service.nodes.sweep_streams() == 1  # its job is assigned and not yet started
        assert service.notifier.version(node_topic(node.node_id)) == seen + 1  # its stream looks again
        sent = next(steps)
        assert isinstance(sent, JobRecord) and sent.job_id == job.job_id

        service.notifier.set_relayed(False)  # the relay is down: streams poll again
        wait = next(steps)
        assert isinstance(wait, Wait) and wait.timeout_s == service.config.stream_poll_interval_s
        assert service.nodes.sweep_streams() == 0  # and the sweep leaves it to them
        steps.close()
    finally:
        service.db.dispose()
