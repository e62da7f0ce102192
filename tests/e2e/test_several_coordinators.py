"""Several coordinators as one service, on one PostgreSQL database (issue 27).

Real processes over TLS, each coordinator with its own self-signed certificate pinned per
address: consumers on every coordinator, nodes spread across them (each given every address),
and jobs streamed across. A coordinator SIGKILLed mid-stream, and the notification channel
cut (pg_terminate_backend on the LISTEN connections): every job completes or fails clearly,
each consumer's text is the job's text exactly once, and the ledger audit is clean.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from contracts.tls import CoordinatorTrust
from mlxnet.consumer import JobClient, JobRequestError, StreamedTokens
from mlxnet.processes import Child, spawn_node, start_coordinator, wait_until_registered
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import job_pb2
from tests.conftest import fresh_postgres_database

pytestmark = pytest.mark.e2e

MODEL_ID = "test/tiny-llama"
PROMPT = "And the LORD said unto Noah"
STREAM_DEADLINE_S = 240.0
QUIET_DEADLINE_S = 120.0
RELAY_BACK_DEADLINE_S = 60.0
SHORT_TOKENS = 24
LONG_TOKENS = 400  # long enough that the kill lands mid-stream on this loaded machine


@dataclass
class Cluster:
    work_dir: Path
    database_url: str
    coordinators: list[Child] = field(default_factory=list)
    nodes: list[Child] = field(default_factory=list)
    node_home: dict[str, int] = field(default_factory=dict)  # node id -> coordinator it joined

    @property
    def addresses(self) -> list[str]:
        return [c.extra["address"] for c in self.coordinators]

    def trusts(self) -> dict[str, CoordinatorTrust]:
        return {c.extra["address"]: c.trust for c in self.coordinators}

    def consumer(self, home: int) -> JobClient:
        """A consumer that speaks to coordinator `home` first, and fails over to the others."""
        order = self.addresses[home:] + self.addresses[:home]
        return JobClient(",".join(order), "failover-e2e", trust_by_address=self.trusts())

    def start_node(self, name: str, home: int, model_dir: Path) -> None:
        """A node given every coordinator's address, ordered so that it joins `home` first."""
        identity = load_or_create_identity(self.work_dir / "nodes" / name / "identity.pem")
        count = len(self.coordinators)
        start = int(identity.node_id[-8:], 16) % count  # where the agent starts in its list
        order = [self.coordinators[(home + i - start) % count] for i in range(count)]
        child = spawn_node(
            self.work_dir, name, ",".join(c.extra["address"] for c in order),
            [f"{MODEL_ID}={model_dir}"], profile="m4-max-128", operator=f"op-{name}",
            max_concurrent_jobs=2, extra_args=(
                "--coordinator-fingerprint", ",".join(c.trust.fingerprint for c in order)))
        self.nodes.append(wait_until_registered(child))
        self.node_home[identity.node_id] = home

    def metrics(self, index: int) -> str:
        child = self.coordinators[index]
        context = ssl.create_default_context(cafile=child.extra["certificate"])
        with urllib.request.urlopen(f"{child.extra['url']}/metrics", context=context,
                                    timeout=10) as answer:
            return answer.read().decode()

    def stop(self) -> None:
        for child in [*self.nodes, *self.coordinators]:
            with contextlib.suppress(Exception):
                child.stop()


@contextlib.contextmanager
def cluster(tmp_path: Path, model_dir: Path, coordinators: int, nodes: int) -> Iterator[Cluster]:
    with fresh_postgres_database() as database_url:
        net = Cluster(tmp_path, database_url)
        try:
            for index in range(coordinators):  # one after another: the first one migrates
                net.coordinators.append(start_coordinator(
                    tmp_path / f"coordinator-{index}", database_url=database_url,
                    heartbeat_interval_ms=1000, allow_anonymous=True))  # offline after 5 s
            for index in range(nodes):
                net.start_node(f"node-{index}", index % coordinators, model_dir)
            yield net
        finally:
            net.stop()


@dataclass
class Streamed:
    home: int
    job_id: str = ""
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    final: job_pb2.Job | None = None
    error: str = ""
    first_token: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


def stream_jobs(net: Cluster, home: int, count: int, max_tokens: int) -> list[Streamed]:
    """Submit count jobs at coordinator `home` and stream each on its own thread."""
    client = net.consumer(home)
    results = [Streamed(home) for _ in range(count)]

    def run(result: Streamed) -> None:
        try:
            job = client.submit(MODEL_ID, PROMPT, max_tokens=max_tokens)
            result.job_id = job.job_id
            for item in client.stream(job.job_id):
                if isinstance(item, StreamedTokens):
                    result.text += item.text
                    result.tokens += item.token_ids
                    result.first_token.set()
                else:
                    result.final = item
        except JobRequestError as error:
            result.error = str(error)
        finally:
            result.first_token.set()

    for result in results:
        result.thread = threading.Thread(target=run, args=(result,), daemon=True)
        result.thread.start()
    return results


def wait_for_streams(results: list[Streamed]) -> None:
    for result in results:
        assert result.thread is not None
        result.thread.join(STREAM_DEADLINE_S)
        assert not result.thread.is_alive(), f"the stream of {result.job_id} never ended"


def assert_each_ended_once(results: list[Streamed]) -> None:
    """Completed with exactly its text streamed once, or failed with a reason; never silent."""
    for result in results:
        assert result.final is not None, f"job {result.job_id} ended without a final job: {result.error}"
        if result.final.status == job_pb2.JOB_STATUS_COMPLETED:
            assert result.text == result.final.text and result.text
            assert len(result.tokens) == result.final.completion_tokens
        else:
            assert result.final.status == job_pb2.JOB_STATUS_FAILED and result.final.error


def assert_ledger_clean(database_url: str, job_ids: list[str]) -> None:
    """Every job ended, none charged or credited twice, and the full audit finds nothing."""
    from sqlalchemy import select

    from coordinator.money.epochs import expected_credits
    from coordinator.storage.database import Database
    from coordinator.storage.tables import jobs
    from ledger.book import transfers_for_job
    from ledger.full_audit import audit
    from ledger.model import TransferKind

    db = Database(database_url)
    try:
        deadline = time.monotonic() + QUIET_DEADLINE_S
        while True:
            with db.read_transaction() as session:
                active = session.execute(select(jobs.c.job_id).where(
                    jobs.c.status.in_(("queued", "assigned", "running")))).scalars().all()
            if not active or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert active == [], f"jobs never ended: {active}"
        with db.read_transaction() as session:
            for job_id in job_ids:
                transfers = transfers_for_job(session, job_id)
                for kind in (TransferKind.JOB_CHARGE, TransferKind.JOB_OPERATOR_CREDIT):
                    # One transfer of each at most; a held credit's post (or void) names it.
                    made = [t for t in transfers if t.kind is kind and t.pending_id is None]
                    resolved = [t.pending_id for t in transfers if t.kind is kind and t.pending_id]
                    assert len(made) <= 1, (job_id, transfers)
                    assert len(resolved) <= len(made), (job_id, transfers)
            report = audit(session, expected_credits=list(expected_credits(session)))
        assert report.differences == []
    finally:
        db.dispose()


def ran_across(net: Cluster, results: list[Streamed]) -> int:
    """Jobs whose consumer's coordinator is not the one its node joined."""
    return sum(1 for r in results if r.final is not None and r.final.node_ids
               and net.node_home.get(r.final.node_ids[0]) not in (None, r.home))


def test_two_coordinators_stream_across_and_a_coordinator_killed_mid_stream_loses_nothing(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    with cluster(tmp_path, tiny_model_dir, coordinators=2, nodes=2) as net:
        first_wave = [r for home in (0, 1) for r in stream_jobs(net, home, 4, SHORT_TOKENS)]
        wait_for_streams(first_wave)
        assert_each_ended_once(first_wave)
        assert all(r.final.status == job_pb2.JOB_STATUS_COMPLETED for r in first_wave)  # type: ignore[union-attr]
        assert ran_across(net, first_wave) >= 1

        second_wave = [r for home in (0, 1) for r in stream_jobs(net, home, 3, LONG_TOKENS)]
        assert all(r.first_token.wait(STREAM_DEADLINE_S) for r in second_wave)
        killed_at_ms = time.time_ns() // 1_000_000
        net.coordinators[0].kill()  # SIGKILL, mid-stream: its consumers and node fail over
        wait_for_streams(second_wave)
        assert_each_ended_once(second_wave)
        assert any(not r.final.finished_at_ms or r.final.finished_at_ms > killed_at_ms  # type: ignore[union-attr]
                   for r in second_wave), "the kill came after every job had ended"

        # The node that had joined the dead coordinator works on at the other.
        after = stream_jobs(net, 1, 4, SHORT_TOKENS)
        wait_for_streams(after)
        assert_each_ended_once(after)
        assert all(r.final.status == job_pb2.JOB_STATUS_COMPLETED for r in after)  # type: ignore[union-attr]
        assert all(node.process.poll() is None for node in net.nodes)
        assert_ledger_clean(net.database_url, [r.job_id for r in [*first_wave, *second_wave, *after]])


def _cut_the_notification_channel(database_url: str) -> int:
    """pg_terminate_backend on every coordinator's LISTEN connection to this database."""
    name = database_url.rsplit("/", 1)[1]
    admin = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as connection:
        return len(connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
            "AND query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()", (name,)).fetchall())


def _lag_count(exposition: str) -> float:
    line = next(line for line in exposition.splitlines()
                if line.startswith("mlxnet:event_bus_lag_seconds_count"))
    return float(line.split()[1])


def test_three_coordinators_ride_out_the_notification_channel_cut(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    with cluster(tmp_path, tiny_model_dir, coordinators=3, nodes=3) as net:
        first_wave = [r for home in (0, 1, 2) for r in stream_jobs(net, home, 2, SHORT_TOKENS)]
        wait_for_streams(first_wave)
        assert_each_ended_once(first_wave)
        heard_before = [_lag_count(net.metrics(i)) for i in range(3)]
        assert all(count >= 1 for count in heard_before)  # each heard the others' news

        cut_wave = [r for home in (0, 1, 2) for r in stream_jobs(net, home, 2, LONG_TOKENS)]
        assert all(r.first_token.wait(STREAM_DEADLINE_S) for r in cut_wave)
        assert _cut_the_notification_channel(net.database_url) == 3
        wait_for_streams(cut_wave)
        assert_each_ended_once(cut_wave)
        assert all(r.final.status == job_pb2.JOB_STATUS_COMPLETED for r in cut_wave)  # type: ignore[union-attr]

        # Each listener came back, and news from the others reaches it again.
        deadline = time.monotonic() + RELAY_BACK_DEADLINE_S
        while time.monotonic() < deadline and not all(
                "mlxnet:event_bus_up 1.0" in net.metrics(i) for i in range(3)):
            time.sleep(0.2)
        heard_cut = [_lag_count(net.metrics(i)) for i in range(3)]
        after = [r for home in (0, 1, 2) for r in stream_jobs(net, home, 2, SHORT_TOKENS)]
        wait_for_streams(after)
        assert_each_ended_once(after)
        assert all(r.final.status == job_pb2.JOB_STATUS_COMPLETED for r in after)  # type: ignore[union-attr]
        assert all(_lag_count(net.metrics(i)) > heard_cut[i] for i in range(3))
        assert_ledger_clean(net.database_url, [r.job_id for r in [*first_wave, *cut_wave, *after]])
