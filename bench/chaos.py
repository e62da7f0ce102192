"""Chaos: jobs keep their promises through faults, and nothing unearned is paid.

A coordinator, node agents (real MLX inference on the tiny model) and clients run as real
processes and threads on loopback, on a PostgreSQL database of their own, while faults are
injected: node SIGKILLs (some mid-stream), coordinator SIGKILLs, PostgreSQL restarts (`fast`
and `immediate`, on a cluster of its own made with initdb on another port: the shared server
at 5432 is never restarted; without initdb, a database outage on the shared server instead)
and network cuts between the nodes and the coordinator (a TCP proxy that drops every
connection and refuses new ones). Clients retry with the same Idempotency-Key until their
request completes. Afterwards every job and every transfer is checked.

    python -m bench.chaos                            # the full run: 1,000 jobs, 40 faults
    python -m bench.chaos --jobs 60 --faults 8       # a short one
    python -m bench.chaos --shared-postgres          # no cluster of its own: outages, no restarts

Prints each check, and each fault kind's recovery time (fault to the next completed request:
min, median, max); exits 1 when a check fails. tests/e2e/test_chaos.py runs a short version.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from contracts.ids import job_id_for_request
from contracts.tls import CoordinatorTrust
from mlxnet.processes import (
    OPERATOR_KEY_ENV,
    Child,
    operator_key,
    spawn_node,
    start_coordinator,
    wait_until_registered,
)

log = logging.getLogger("bench.chaos")

MODEL_ID = "test/tiny-llama"
CONSUMER = "chaos"
PROMPT = "And the LORD said unto Noah"
HEARTBEAT_INTERVAL_MS = 500  # the coordinator counts a node offline after 5 of these
REQUEST_DEADLINE_S = 300.0  # a request not completed by then is lost
ATTEMPT_TIMEOUT = httpx.Timeout(connect=5.0, read=30.0, write=10.0, pool=5.0)
RETRY_DELAY_S_MIN, RETRY_DELAY_S_MAX = 0.2, 3.0
QUIESCE_DEADLINE_S = 120.0  # after the last request, every job must have ended by then
NODE_DOWN_S = 1.0
COORDINATOR_DOWN_S = 3.0
NETWORK_CUT_S = 3.0
DATABASE_DOWN_S = 3.0
MIDSTREAM_WAIT_S = 10.0
NODE_PROFILES = ("m4-max-128", "m3-ultra-512", "m4-max-128")
ALL_KINDS = ("node_kill", "node_kill_midstream", "coordinator_kill", "network_cut",
             "postgres_restart_fast", "postgres_restart_immediate")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- PostgreSQL ----------------------------------------------------------------------------


class PostgresCluster:
    """A PostgreSQL cluster of our own (initdb, pg_ctl) on a free port, run as `postgres`
    when we are root; restarting it touches nothing else on the machine."""

    def __init__(self) -> None:
        # A directory of its own that the postgres user can reach (a test's tmp_path may not be).
        work_dir = Path(tempfile.mkdtemp(prefix="mlxnet-chaos-pg-"))
        work_dir.chmod(0o755)
        self.work_dir = work_dir
        self.data_dir = work_dir / "pgdata"
        self.port = free_port()
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as_postgres:
            shutil.chown(work_dir, "postgres")
        self._run("initdb", "-D", str(self.data_dir), "-A", "trust", "-U", "postgres", "--no-sync")
        self._log = work_dir / "postgres.log"
        self._ctl("start", "-w", "-t", "60", "-l", str(self._log),
                  "-o", f"-p {self.port} -k {work_dir} -c listen_addresses=127.0.0.1 -c fsync=off")
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @staticmethod
    def available() -> bool:
        return shutil.which("initdb") is not None and shutil.which("pg_ctl") is not None

    def _run(self, *argv: str) -> None:
        subprocess.run([*self._as_postgres, *argv], check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _ctl(self, *argv: str) -> None:
        self._run("pg_ctl", "-D", str(self.data_dir), *argv)

    def restart(self, mode: str) -> None:
        self._ctl("restart", "-w", "-t", "60", "-m", mode, "-l", str(self._log))

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self._ctl("stop", "-m", "immediate", "-w", "-t", "30")
        shutil.rmtree(self.work_dir, ignore_errors=True)


class SharedPostgres:
    """A database of our own on the shared server; its outages refuse connections to it only."""

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self._psycopg = psycopg
        self._admin = admin_url.replace("postgresql+psycopg://", "postgresql://")
        self.name = f"mlxnet_chaos_{random.randrange(1 << 40):010x}"
        with psycopg.connect(self._admin, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'CREATE DATABASE "{self.name}"')
        self.url = f"{admin_url.rsplit('/', 1)[0]}/{self.name}"

    def outage(self, seconds: float) -> None:
        with self._psycopg.connect(self._admin, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false')
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s AND pid <> pg_backend_pid()", (self.name,))
        time.sleep(seconds)
        with self._psycopg.connect(self._admin, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true')

    def stop(self) -> None:
        with contextlib.suppress(self._psycopg.Error), \
                self._psycopg.connect(self._admin, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


# --- the network cut -----------------------------------------------------------------------


class BreakableProxy:
    """TCP from the nodes to the coordinator's gRPC port; cut() drops every connection and
    refuses new ones until restore()."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._cut = threading.Event()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()
                with self._lock:
                    self._sockets.discard(end)

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            live = list(self._sockets)
        for end in live:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._server.close()


# --- the network under test ----------------------------------------------------------------


@dataclass
class Network:
    work_dir: Path
    database_url: str
    model_dir: Path
    grpc_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    coordinator: Child | None = None
    nodes: dict[str, Child] = field(default_factory=dict)
    proxy: BreakableProxy | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start_coordinator(self) -> None:
        self.coordinator = start_coordinator(
            self.work_dir, database_url=self.database_url, port=self.grpc_port,
            http_port=self.http_port, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            tls=False)  # plaintext on loopback: the faults are the subject here, not TLS

    def kill_coordinator(self) -> None:
        assert self.coordinator is not None
        self.coordinator.kill()

    def start_node(self, name: str, profile: str) -> None:
        assert self.proxy is not None
        assert self.coordinator is not None
        operator = f"op-{name}"
        # The node reaches the coordinator through the proxy: its operator's key is made on the coordinator.
        key = operator_key(self.coordinator.extra["address"], operator)
        assert key is not None
        child = spawn_node(self.work_dir, name, f"127.0.0.1:{self.proxy.port}",
                           [f"{MODEL_ID}={self.model_dir}"], profile=profile, operator=operator,
                           max_concurrent_jobs=2, trust=CoordinatorTrust(insecure=True),
                           env={OPERATOR_KEY_ENV: key})
        self.nodes[name] = wait_until_registered(child)

    @property
    def http_base(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def stop(self) -> None:
        for child in [*self.nodes.values(), *([self.coordinator] if self.coordinator else [])]:
            with contextlib.suppress(Exception):
                child.stop()
        if self.proxy is not None:
            self.proxy.close()


# --- clients -------------------------------------------------------------------------------


@dataclass
class Outcome:
    key: str
    stream: bool
    ok: bool = False
    job_id: str = ""
    attempts: int = 0
    completed_at: float = 0.0  # time.monotonic()
    errors: list[str] = field(default_factory=list)


def _attempt(client: httpx.Client, key: str, stream: bool, max_tokens: int) -> tuple[bool, str, str]:
    """One try: (completed, job id, what went wrong)."""
    body = {"model": MODEL_ID, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0,
            "stream": stream}
    headers = {"Idempotency-Key": key}
    if not stream:
        answer = client.post("/v1/completions", json=body, headers=headers)
        job_id = answer.headers.get("x-mlxnet-job-id", "")
        return answer.status_code == 200, job_id, f"HTTP {answer.status_code}"
    with client.stream("POST", "/v1/completions", json=body, headers=headers) as answer:
        job_id = answer.headers.get("x-mlxnet-job-id", "")
        if answer.status_code != 200:
            return False, job_id, f"HTTP {answer.status_code}"
        for line in answer.iter_lines():
            if line == "data: [DONE]":
                return True, job_id, ""
            if line.startswith("data: ") and '"error"' in line[:20]:
                return False, job_id, "error event: " + line[6:200]
    return False, job_id, "stream ended without [DONE]"


def run_request(base_url: str, api_key: str, key: str, stream: bool, max_tokens: int,
                completed: Callable[[float], None]) -> Outcome:
    """Until the request completes or its deadline passes; every try has its own timeouts."""
    outcome = Outcome(key, stream)
    deadline = time.monotonic() + REQUEST_DEADLINE_S
    delay_s = RETRY_DELAY_S_MIN
    with httpx.Client(base_url=base_url, timeout=ATTEMPT_TIMEOUT,
                      headers={"Authorization": f"Bearer {api_key}"}) as client:
        while time.monotonic() < deadline:
            outcome.attempts += 1
            try:
                ok, job_id, problem = _attempt(client, key, stream, max_tokens)
            except httpx.HTTPError as error:
                ok, job_id, problem = False, "", f"{type(error).__name__}: {error}"
            if ok:
                outcome.ok, outcome.job_id, outcome.completed_at = True, job_id, time.monotonic()
                completed(outcome.completed_at)
                return outcome
            outcome.errors.append(problem[:200])
            time.sleep(min(delay_s, max(0.0, deadline - time.monotonic())))
            delay_s = min(delay_s * 2, RETRY_DELAY_S_MAX)
    return outcome


# --- faults --------------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    at: float  # time.monotonic() when injected
    detail: str = ""
    recovered_after_s: float | None = None


class Injector:
    def __init__(self, network: Network, postgres: PostgresCluster | SharedPostgres,
                 kinds: tuple[str, ...], seed: int) -> None:
        self.network, self.postgres, self.kinds = network, postgres, kinds
        self.random = random.Random(seed)
        self.faults: list[Fault] = []

    def inject(self, kind: str) -> Fault:
        fault = Fault(kind, time.monotonic())
        getattr(self, "_" + kind)(fault)
        self.faults.append(fault)
        log.info("fault %d: %s %s", len(self.faults), kind, fault.detail)
        return fault

    def _restart_node(self, name: str) -> None:
        self.network.nodes[name].kill()
        time.sleep(NODE_DOWN_S)
        self.network.start_node(name, NODE_PROFILES[int(name.removeprefix("node")) % len(NODE_PROFILES)])

    def _node_kill(self, fault: Fault) -> None:
        name = self.random.choice(sorted(self.network.nodes))
        fault.detail = name
        self._restart_node(name)

    def _node_kill_midstream(self, fault: Fault) -> None:
        """Kill a node while one of its jobs is streaming (the database says which)."""
        name = _streaming_node(self.network, self.postgres.url, MIDSTREAM_WAIT_S)
        fault.detail = f"{name} mid-stream" if name else "none streaming: a random node"
        self._restart_node(name or self.random.choice(sorted(self.network.nodes)))

    def _coordinator_kill(self, fault: Fault) -> None:
        self.network.kill_coordinator()
        time.sleep(COORDINATOR_DOWN_S)
        self.network.start_coordinator()

    def _network_cut(self, fault: Fault) -> None:
        assert self.network.proxy is not None
        self.network.proxy.cut()
        time.sleep(NETWORK_CUT_S)
        self.network.proxy.restore()

    def _postgres_restart_fast(self, fault: Fault) -> None:
        self._postgres_fault(fault, "fast")

    def _postgres_restart_immediate(self, fault: Fault) -> None:
        self._postgres_fault(fault, "immediate")

    def _postgres_fault(self, fault: Fault, mode: str) -> None:
        if isinstance(self.postgres, PostgresCluster):
            self.postgres.restart(mode)
            fault.detail = f"pg_ctl restart -m {mode}"
        else:
            self.postgres.outage(DATABASE_DOWN_S)
            fault.detail = "an outage of our database (shared server: no restart)"


def _streaming_node(network: Network, database_url: str, wait_s: float) -> str | None:
    from sqlalchemy import create_engine, text

    by_id = {child.extra.get("node_id"): name for name, child in network.nodes.items()}
    engine = create_engine(database_url, pool_pre_ping=True)
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception), engine.connect() as connection:
                rows = connection.execute(text(
                    "SELECT a.node_id FROM jobs j JOIN job_assignments a ON a.job_id = j.job_id "
                    "AND a.attempt = j.attempt AND a.active WHERE j.status = 'running'")).scalars().all()
                for node_id in rows:
                    if node_id in by_id:
                        return by_id[node_id]
            time.sleep(0.05)
    finally:
        engine.dispose()
    return None


# --- the checks afterwards -----------------------------------------------------------------


@dataclass
class Report:
    requests: int
    completed: int
    lost: list[str]
    stuck: list[str]
    doubled: list[str]
    wrong_job: list[str]
    double_payments: list[str]
    credits_without_receipt: list[str]
    audit_differences: list[str]
    reservations_open: int
    postgres: str  # what the PostgreSQL faults were
    faults: dict[str, int]
    recovery_s: dict[str, tuple[float, float, float]]
    duration_s: float

    @property
    def ok(self) -> bool:
        return not (self.lost or self.stuck or self.doubled or self.wrong_job or self.double_payments
                    or self.credits_without_receipt or self.audit_differences or self.reservations_open)


def _paid_twice(transfers) -> bool:  # type: ignore[no-untyped-def]
    """A job charged or credited twice. A held credit's post (or void) names its hold (pending_id):
    it settles the same payment, so it is not counted again; a hold resolved twice is."""
    from ledger.model import TransferKind

    for kind in (TransferKind.JOB_CHARGE, TransferKind.JOB_OPERATOR_CREDIT):
        of_kind = [t for t in transfers if t.kind is kind]
        held = {t.id for t in of_kind}
        settling = [t.pending_id for t in of_kind if t.pending_id in held]
        payments = [t for t in of_kind if t.pending_id not in held]
        if len(payments) > 1 or len(settling) != len(set(settling)):
            return True
    return False


def _wait_until_quiet(db, deadline_s: float) -> list[str]:  # type: ignore[no-untyped-def]
    """Jobs still queued, assigned or running once every job should have ended, and completions
    receipts queued that the postings loop has not posted by then (named "postings of N jobs")."""
    from sqlalchemy import select

    from coordinator.storage.tables import jobs
    from ledger.posting_queue import queue_state

    deadline = time.monotonic() + deadline_s
    while True:
        with db.read_transaction() as session:
            active = list(session.execute(select(jobs.c.job_id).where(
                jobs.c.status.in_(("queued", "assigned", "running")))).scalars().all())
            queued = queue_state(session).queued
        if queued:
            active.append(f"postings of {queued} jobs")
        if not active or time.monotonic() >= deadline:
            return active
        time.sleep(0.5)


def check(database_url: str, outcomes: list[Outcome], faults: list[Fault], duration_s: float,
          postgres: str) -> Report:
    from coordinator.jobs.submission import ATTEMPTS_PER_REQUEST_MAX, _attempt_request_id
    from coordinator.money.epochs import expected_credits
    from coordinator.storage import job_rows
    from coordinator.storage.database import Database
    from ledger.book import balance, transfers_for_job
    from ledger.full_audit import audit
    from ledger.jobs import consumer_account_id
    from ledger.model import TransferKind

    db = Database(database_url)
    try:
        stuck = _wait_until_quiet(db, QUIESCE_DEADLINE_S)
        doubled, wrong_job, double_payments = [], [], []
        with db.read_transaction() as session:
            for outcome in outcomes:
                completed = []
                for number in range(1, ATTEMPTS_PER_REQUEST_MAX + 1):
                    job_id = job_id_for_request(CONSUMER, _attempt_request_id(outcome.key, number))
                    job = job_rows.job_by_id(session, job_id)
                    if job is None:
                        break
                    if job.status.value == "completed":
                        completed.append(job_id)
                    if _paid_twice(transfers_for_job(session, job_id)):
                        double_payments.append(job_id)
                if len(completed) > 1:
                    doubled.append(outcome.key)
                if outcome.ok and completed != [outcome.job_id]:
                    wrong_job.append(f"{outcome.key}: told {outcome.job_id}, completed {completed}")
            report = audit(session, expected_credits=list(expected_credits(session)))
            found = balance(session, consumer_account_id(CONSUMER))  # type: ignore[arg-type]
        differences = [f"[{d.check}] {d.subject}: {d.detail}" for d in report.differences]
    finally:
        db.dispose()
    return Report(
        requests=len(outcomes), completed=sum(o.ok for o in outcomes),
        lost=[o.key for o in outcomes if not o.ok], stuck=stuck, doubled=doubled,
        wrong_job=wrong_job, double_payments=double_payments,
        credits_without_receipt=[d for d in differences if d.startswith("[credit]")],
        audit_differences=differences,
        reservations_open=0 if found is None else found.debits_pending, postgres=postgres,
        faults={kind: sum(f.kind == kind for f in faults) for kind in sorted({f.kind for f in faults})},
        recovery_s=_recovery(faults), duration_s=duration_s)


def _recovery(faults: list[Fault]) -> dict[str, tuple[float, float, float]]:
    by_kind: dict[str, list[float]] = {}
    for fault in faults:
        if fault.recovered_after_s is not None:
            by_kind.setdefault(fault.kind, []).append(fault.recovered_after_s)
    return {kind: (min(times), statistics.median(times), max(times)) for kind, times in by_kind.items()}


# --- the run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    jobs: int = 1_000
    faults: int = 40
    clients: int = 4
    nodes: int = 3
    kinds: tuple[str, ...] = ALL_KINDS
    own_cluster: bool = True
    seed: int = 28
    max_tokens: tuple[int, ...] = (16, 40, 72)


@contextlib.contextmanager
def _postgres(own_cluster: bool) -> Iterator[PostgresCluster | SharedPostgres]:
    if own_cluster and PostgresCluster.available():
        postgres: PostgresCluster | SharedPostgres = PostgresCluster()
    else:
        admin = os.environ.get("MLXNET_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
        postgres = SharedPostgres(admin)
    try:
        yield postgres
    finally:
        postgres.stop()


def run(settings: Settings, work_dir: Path, model_dir: Path) -> Report:
    from coordinator.money.api_keys import KeyLimits
    from coordinator.storage.database import Database, upgrade_schema
    from mlxnet import keys_cli

    with _postgres(settings.own_cluster) as postgres:
        upgrade_schema(postgres.url)
        db = Database(postgres.url)
        _, api_key = keys_cli.create(db, CONSUMER, KeyLimits(), deposit_amount=10**6 * 10**9)
        db.dispose()
        network = Network(work_dir, postgres.url, model_dir)
        try:
            network.start_coordinator()
            network.proxy = BreakableProxy(network.grpc_port)
            for number in range(settings.nodes):
                network.start_node(f"node{number}", NODE_PROFILES[number % len(NODE_PROFILES)])
            return _drive(settings, network, postgres, api_key)
        finally:
            network.stop()


def _drive(settings: Settings, network: Network, postgres: PostgresCluster | SharedPostgres,
           api_key: str) -> Report:
    run_id = f"{random.Random(settings.seed).randrange(1 << 32):08x}-{int(time.time())}"
    injector = Injector(network, postgres, settings.kinds, settings.seed)
    completions: list[float] = []
    completions_lock = threading.Lock()

    def completed(at: float) -> None:
        with completions_lock:
            completions.append(at)

    requests = [(f"chaos-{run_id}-{i}", i % 2 == 0, settings.max_tokens[i % len(settings.max_tokens)])
                for i in range(settings.jobs)]
    pending = iter(requests)
    pending_lock = threading.Lock()
    outcomes: list[Outcome] = []

    def client() -> None:
        while True:
            with pending_lock:
                request = next(pending, None)
            if request is None:
                return
            outcome = run_request(network.http_base, api_key, *request, completed=completed)
            with pending_lock:
                outcomes.append(outcome)

    started = time.monotonic()
    threads = [threading.Thread(target=client, name=f"client{i}", daemon=True)
               for i in range(settings.clients)]
    for thread in threads:
        thread.start()
    _inject_while_running(settings, injector, threads, lambda: len(outcomes))
    for thread in threads:
        thread.join(REQUEST_DEADLINE_S * 2)
    duration_s = time.monotonic() - started
    with completions_lock:
        done_at = sorted(completions)
    for fault in injector.faults:
        after = next((at for at in done_at if at > fault.at), None)
        fault.recovered_after_s = None if after is None else after - fault.at
    kind = ("a cluster of its own (pg_ctl restart -m fast / immediate)"
            if isinstance(postgres, PostgresCluster) else "a database on the shared server (outages)")
    return check(postgres.url, outcomes, injector.faults, duration_s, kind)


def _inject_while_running(settings: Settings, injector: Injector, threads: list[threading.Thread],
                          finished: Callable[[], int]) -> None:
    """Spread the faults over the run: one each time another share of the jobs is done."""
    kinds = itertools.cycle(settings.kinds)
    per_fault = max(1, settings.jobs // (settings.faults + 1))
    for number in range(settings.faults):
        target = (number + 1) * per_fault
        while finished() < target and any(thread.is_alive() for thread in threads):
            time.sleep(0.1)
        if not any(thread.is_alive() for thread in threads):
            log.warning("the clients finished after %d of %d faults", number, settings.faults)
            return
        injector.inject(next(kinds))


def print_report(report: Report) -> None:
    checks = [
        ("requests completed", f"{report.completed} of {report.requests}"),
        ("lost (never completed)", len(report.lost)),
        ("stuck (still active at the end)", len(report.stuck)),
        ("completed twice", len(report.doubled)),
        ("answered with another job than the one completed", len(report.wrong_job)),
        ("jobs charged or credited twice", len(report.double_payments)),
        ("credits without a verified receipt", len(report.credits_without_receipt)),
        ("ledger audit differences", len(report.audit_differences)),
        ("reservations left open (base units)", report.reservations_open),
        ("faults injected", f"{sum(report.faults.values())} {json.dumps(report.faults)}"),
        ("PostgreSQL", report.postgres),
        ("duration", f"{report.duration_s:.0f} s"),
    ]
    for name, value in checks:
        print(f"{name:52} {value}")
    print("recovery per fault kind (fault -> next completed request), seconds: min / median / max")
    for kind, (low, mid, high) in sorted(report.recovery_s.items()):
        print(f"  {kind:30} {low:6.2f} / {mid:6.2f} / {high:6.2f}")
    for name, items in (("lost", report.lost), ("stuck", report.stuck), ("doubled", report.doubled),
                        ("wrong job", report.wrong_job), ("audit", report.audit_differences)):
        for item in items[:10]:
            print(f"  {name}: {item}")
    print("OK" if report.ok else "FAILED")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--faults", type=int, default=40)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--kinds", default=",".join(ALL_KINDS), help="fault kinds, in turn")
    parser.add_argument("--shared-postgres", action="store_true",
                        help="a database on $MLXNET_TEST_POSTGRES_URL's server (outages, no restarts)")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = Settings(jobs=args.jobs, faults=args.faults, clients=args.clients, nodes=args.nodes,
                        kinds=tuple(args.kinds.split(",")), own_cluster=not args.shared_postgres,
                        seed=args.seed)
    work_dir = Path(tempfile.mkdtemp(prefix="mlxnet-chaos-"))
    try:
        from node_agent.tiny_model import build_tiny_model

        model_dir = build_tiny_model(work_dir / "models" / "tiny-llama")
        report = run(settings, work_dir, model_dir)
        print_report(report)
        return 0 if report.ok else 1
    finally:
        if args.keep:
            print(f"work directory: {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
