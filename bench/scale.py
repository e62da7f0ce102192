"""One coordinator process, N simulated Macs speaking the real protocol: what idling, heartbeats
and jobs cost it, in CPU time and PostgreSQL transactions.

    .venv/bin/python -m bench.scale [--nodes 1000] [--heartbeat-rounds 3] [--jobs 300]
                                    [--idle-s 10] [--operators both|distinct|shared] [--comeback-round]

A fresh PostgreSQL database (MLXNET_TEST_POSTGRES_URL, else the local `test` server) and a
coordinator child process (`mlxnet coordinator`, plaintext on loopback). The Macs live in
this process on grpc.aio: each registers with RegisterChallenge's nonce and a request signed
by its own Ed25519 key (node_agent.coordinator_client.register_request), holds a
ReceiveAssignments stream, sends its heartbeats on one open Heartbeats stream and signs the
share the agent signs (contracts.lending.heartbeat_message, one per signed_heartbeat_interval_ms), and
answers each assignment with one token and a signed receipt (contracts.receipts).

Measured on the coordinator's process alone, with CPU time (/proc), so a busy machine slows
the run without changing the figures much:
- idle: N streams open, no heartbeats, for --idle-s: CPU share of a core, PostgreSQL
  transactions/s (pg_stat_database.xact_commit of the bench's database, read from another);
- heartbeats: --heartbeat-rounds heartbeats from every Mac, as the agent sends them: CPU ms and transactions each;
- comebacks (--comeback-round): one round from Macs the coordinator counts offline, the same;
- jobs: --jobs 1-token jobs from one consumer, with every Mac its own operator (distinct) and
  all Macs one operator's (shared): jobs/s (wall, noisy here) and CPU ms per job.
Then the arithmetic for 100,000 Macs at a 10 s interval, from the measured costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psycopg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.counted_coordinator import OUTPUT_ENV
from bench.process_cpu import cpu_seconds
from contracts.hardware import ChipTier, HardwareReport
from contracts.ids import JobId, node_id_from_public_key
from contracts.keyfile import public_key_raw
from contracts.lending import Heartbeat, LendingMode, LendingState, heartbeat_message
from contracts.models import ModelSpec
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from coordinator.money.api_keys import KeyLimits
from contracts.signing import SESSION_METADATA_KEY, session_bind_message
from coordinator.storage.database import Database, upgrade_schema
from coordinator.world.operator_keys import create_operator_key
from mlxnet import keys_cli
from mlxnet.processes import start_coordinator
from node_agent.coordinator_client import NodeStatus, bind_nonce, register_request
from node_agent.identity import Identity
from protos.mlxnet.v1 import common_pb2, job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc
from tests.proof_helpers import well_formed_commitment

log = logging.getLogger("bench.scale")

POSTGRES_URL_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
GIB = 1 << 30
MODEL = ModelSpec(model_id="bench/one-token", weights_bytes=GIB, parameter_count=500_000_000,
                  num_layers=8, num_attention_heads=8, num_kv_heads=8, head_dim=64,
                  max_context_tokens=4096, weights_digest="5b" * 32, vocab_size=32_000)
HARDWARE = HardwareReport(chip="Apple M4 Max", chip_family="M4", chip_tier=ChipTier.MAX,
                          memory_bytes=128 * GIB, gpu_working_set_bytes=96 * GIB, gpu_cores=40,
                          memory_bandwidth_gb_s=546.0, os_name="macOS", simulated=True)
LENDING = LendingState(mode=LendingMode.DEDICATED)
NODES_PER_CHANNEL = 200  # streams share HTTP/2 connections, as many agents behind one NAT would not
CONCURRENT_CALLS = 64  # registrations and heartbeats in flight at once
RPC_DEADLINE_S = 60.0
# PostgreSQL 15+ backends report their transaction counts at most once a second while busy, and
# an idle one only after 10 s: a reading must wait that long, or the counts of the phase before
# land in the next one (they were the "31-70 transactions/s while idle" of issue 27).
STATS_FLUSH_S = 11.0
MACS_TARGET, INTERVAL_S_TARGET, PROCESSES_MAX = 100_000, 10.0, 4


@dataclass
class SimulatedMac:
    identity: Identity
    stub: node_pb2_grpc.NodeServiceStub
    token: str = ""
    last_sent_ms: int = 0
    jobs_done: int = 0
    beats_per_signed: int = 1  # the agent signs one heartbeat per signed_heartbeat_interval_ms
    beats: int = 0
    rebinds: int = 0  # BindSession calls after a binding lapsed
    heartbeats: object | None = None  # the open Heartbeats stream (grpc.aio StreamStreamCall)
    stream: object | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The session token, on the channel it registered on (so bound to that connection)."""
        return ((SESSION_METADATA_KEY, self.token),)

    async def register(self, operator: str, operator_key: str) -> None:
        challenge = await self.stub.RegisterChallenge(
            node_pb2.RegisterChallengeRequest(public_key=self.identity.public_key_raw),
            timeout=RPC_DEADLINE_S)
        request = register_request(self.identity, challenge.nonce, HARDWARE, (MODEL,), operator,
                                   self.identity.node_id[:16], 4, NodeStatus(LENDING),
                                   operator_key=operator_key)
        registered = await self.stub.Register(request, timeout=RPC_DEADLINE_S)
        self.token = registered.session_token
        # The agent signs the first beat at least signed_heartbeat_interval_ms after the last
        # signed one (CoordinatorClient._sign_due): at 25 s and 10 s beats, every third, not second.
        self.beats_per_signed = max(1, -(-registered.signed_heartbeat_interval_ms
                                         // max(1, registered.heartbeat_interval_ms)))

    async def heartbeat(self) -> None:
        """A heartbeat as the agent sends it: a message on its open Heartbeats stream, signed
        once in beats_per_signed (the steady state's share, though rounds here run back to back)."""
        sent_at_ms = max(time.time_ns() // 1_000_000, self.last_sent_ms + 1)
        self.last_sent_ms = sent_at_ms
        signature = b""
        if self.beats % self.beats_per_signed == 0:
            signature = self.identity.sign(heartbeat_message(Heartbeat(self.identity.node_id, sent_at_ms, 0, LENDING)))
        self.beats += 1
        request = node_pb2.HeartbeatsRequest(heartbeat=node_pb2.HeartbeatRequest(
            running_jobs=0, sent_at_ms=sent_at_ms, signature=signature,
            lending=node_pb2.LendingState(mode=LENDING.mode.value, accepting_jobs=True)))
        for attempt in range(2):
            if self.heartbeats is None:
                self.heartbeats = self.stub.Heartbeats(metadata=self.metadata())
            try:
                await self.heartbeats.write(request)  # type: ignore[attr-defined]
                await asyncio.wait_for(self.heartbeats.read(), RPC_DEADLINE_S)  # type: ignore[attr-defined]
                return
            except grpc.aio.AioRpcError as error:
                self.heartbeats = None
                nonce = bind_nonce(error)
                if nonce is None or attempt == 1:
                    raise
                await self.bind(nonce)

    async def bind(self, nonce: bytes) -> None:
        """Bind the session again, as the agent does when its binding lapsed: at 10,000 Macs on
        a busy machine, registering them all takes longer than a binding lasts unused."""
        await self.stub.BindSession(node_pb2.BindSessionRequest(
            nonce=nonce, signature=self.identity.sign(session_bind_message(nonce, self.token))),
            timeout=RPC_DEADLINE_S, metadata=self.metadata())
        self.rebinds += 1

    async def serve(self, opened: asyncio.Event) -> None:
        """Hold the assignment stream; answer each job with one token and a signed receipt."""
        stream = self.stub.ReceiveAssignments(node_pb2.ReceiveAssignmentsRequest(),
                                              metadata=self.metadata())
        self.stream = stream
        await stream.wait_for_connection()
        opened.set()
        with contextlib.suppress(asyncio.CancelledError):
            try:
                async for assignment in stream:
                    await self._run(assignment)
            except grpc.aio.AioRpcError as error:
                if error.code() is not grpc.StatusCode.CANCELLED:
                    log.error("node %s: %s %s", self.identity.node_id, error.code().name, error.details())
                    raise

    async def _run(self, assignment: node_pb2.ReceiveAssignmentsResponse) -> None:
        if assignment.HasField("check"):
            return  # a peer check: a simulated Mac holds no weights to replay; it lapses elsewhere
        token_ids, started = (7,), time.time_ns() // 1_000_000

        async def chunks():  # type: ignore[no-untyped-def]
            yield node_pb2.StreamTokensRequest(job_id=assignment.job_id, first_index=0,
                                               token_ids=token_ids, text="a", prompt_tokens=2,
                                               attempt=assignment.attempt)

        await self.stub.StreamTokens(chunks(), timeout=RPC_DEADLINE_S, metadata=self.metadata())
        now = time.time_ns() // 1_000_000
        body = encode_receipt(Receipt(
            JobId(assignment.job_id), self.identity.node_id, assignment.model.model_id,
            assignment.model.weights_digest, prompt_digest(assignment.prompt),
            assignment.sampling.temperature, assignment.sampling.top_p, assignment.sampling.seed,
            assignment.sampling.max_tokens, output_digest(token_ids), 2, len(token_ids), started, now,
            well_formed_commitment(len(token_ids)), FinishReason.LENGTH, now))
        await self.stub.ReportResult(node_pb2.ReportResultRequest(
            job_id=assignment.job_id, attempt=assignment.attempt,
            receipt=common_pb2.SignedReceipt(body=body, signature=self.identity.sign(body))),
            timeout=RPC_DEADLINE_S, metadata=self.metadata())
        self.jobs_done += 1


@contextlib.contextmanager
def fresh_database() -> Iterator[tuple[str, str]]:
    """(SQLAlchemy URL of a new database, libpq URL of the admin database that watches it)."""
    admin = os.environ.get("MLXNET_TEST_POSTGRES_URL", POSTGRES_URL_DEFAULT)
    plain = admin.replace("postgresql+psycopg://", "postgresql://")
    name = f"mlxnet_bench_scale_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(plain, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{admin.rsplit('/', 1)[0]}/{name}", plain
    finally:
        with psycopg.connect(plain, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# What an assignment stream reads when it looks again (NodeSessions._assignment_steps).
STREAM_TABLES = ("job_assignments", "peer_checks")


class Meter:
    """The coordinator's CPU seconds and its database's commits, read together."""

    def __init__(self, pid: int, admin_url: str, database: str) -> None:
        self._pid, self._database = pid, database
        self._admin = psycopg.connect(admin_url, autocommit=True)
        self._bench_url = admin_url.rsplit("/", 1)[0] + "/" + database

    def stream_table_reads(self) -> int:
        """Scans of the tables a stream reads when it looks again (this read is one transaction)."""
        with psycopg.connect(self._bench_url, autocommit=True) as connection:
            row = connection.execute(
                "SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0) FROM pg_stat_user_tables "
                "WHERE relname = ANY(%s)", (list(STREAM_TABLES),)).fetchone()
        assert row is not None
        return int(row[0])

    async def quiet(self, streams: int, timeout_s: float = 300.0) -> None:
        """Wait until every stream just opened has made its first read (one scan of each stream
        table) and they have stopped (a few scans in 5 s, the background loops'), or the timeout."""
        deadline = time.monotonic() + timeout_s
        before = self.stream_table_reads()
        while time.monotonic() < deadline:
            await asyncio.sleep(5.0)
            after = self.stream_table_reads()
            # The background loops scan them too, every interval: a few scans are theirs.
            if after >= streams * len(STREAM_TABLES) and after - before <= max(4, streams // 20):
                return
            before = after
        log.warning("the streams' first reads did not settle in %.0f s", timeout_s)

    def read(self) -> tuple[float, int]:
        self._admin.execute("SELECT pg_stat_clear_snapshot()")
        commits = self._admin.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                                      "WHERE datname = %s", (self._database,)).fetchone()
        assert commits is not None
        return cpu_seconds(self._pid), int(commits[0])

    async def settled(self, wait_s: float = STATS_FLUSH_S) -> tuple[float, int]:
        """A reading once every backend has reported what it did before it (STATS_FLUSH_S)."""
        await asyncio.sleep(wait_s)
        return self.read()

    def close(self) -> None:
        self._admin.close()


async def _bounded(calls: list, limit: int = CONCURRENT_CALLS) -> None:  # type: ignore[type-arg]
    gate = asyncio.Semaphore(limit)

    async def one(call):  # type: ignore[no-untyped-def]
        async with gate:
            await call()

    await asyncio.gather(*(one(call) for call in calls))


@dataclass
class Figures:
    idle_cpu_share: float = 0.0
    idle_transactions_s: float = 0.0
    stream_reads: int = 0  # scans of the stream tables while idle: polling reads
    heartbeat_cpu_ms: float = 0.0
    heartbeat_transactions: float = 0.0
    heartbeat_cpu_ms_net: float = 0.0  # less the idle rate over the same time
    heartbeat_transactions_net: float = 0.0
    # One round from Macs the coordinator counts offline (each beat a comeback), its batches
    # and scheduling passes included, less the idle rate over the same time.
    comeback_cpu_ms_net: float | None = None
    comeback_transactions_net: float | None = None
    job_cpu_ms: dict[str, float] = field(default_factory=dict)
    job_transactions: dict[str, float] = field(default_factory=dict)
    jobs_s: dict[str, float] = field(default_factory=dict)


def _new_identity() -> Identity:
    """A node identity as the agent makes one (node_agent.identity), kept in memory only."""
    key = Ed25519PrivateKey.generate()
    raw = public_key_raw(key)
    return Identity(key, raw, node_id_from_public_key(raw))


async def _fleet(address: str, nodes: int, operator_key: str | None) -> tuple[list[SimulatedMac], list]:  # type: ignore[type-arg]
    # A local subchannel pool each: channels to one address otherwise share one connection.
    channels = [grpc.aio.insecure_channel(address, options=(("grpc.use_local_subchannel_pool", 1),))
                for _ in range(max(1, -(-nodes // NODES_PER_CHANNEL)))]
    macs = [SimulatedMac(_new_identity(), node_pb2_grpc.NodeServiceStub(channels[i // NODES_PER_CHANNEL]))
            for i in range(nodes)]
    opened = [asyncio.Event() for _ in macs]

    async def join(mac: SimulatedMac, event: asyncio.Event) -> None:
        """Register, then open the assignment stream at once, while the new binding is fresh
        (registering 10,000 Macs here takes longer than a binding lasts unused)."""
        await mac.register("fleet" if operator_key else "", operator_key or "")
        mac.tasks.append(asyncio.create_task(mac.serve(event)))

    await _bounded([(lambda m=m, e=e: join(m, e)) for m, e in zip(macs, opened)])

    async def opened_or_failed(event: asyncio.Event, task: asyncio.Task) -> None:  # type: ignore[type-arg]
        """A stream that fails before it opens raises here rather than hanging the bench."""
        waiter = asyncio.ensure_future(event.wait())
        await asyncio.wait((waiter, task), return_when=asyncio.FIRST_COMPLETED)
        if not event.is_set():
            waiter.cancel()
            task.result()  # its error
            raise RuntimeError("a simulated Mac's stream ended before it opened")

    await asyncio.gather(*(opened_or_failed(event, mac.tasks[0]) for event, mac in zip(opened, macs)))
    return macs, channels


async def _close(macs: list[SimulatedMac], channels: list) -> None:  # type: ignore[type-arg]
    for mac in macs:
        for task in mac.tasks:
            task.cancel()
    for channel in channels:
        await channel.close()


async def _jobs(address: str, api_key: str, count: int, meter: Meter,
                macs: list[SimulatedMac]) -> tuple[float, float, float]:
    """(jobs/s wall, coordinator CPU ms, PostgreSQL transactions per job) for `count` 1-token
    jobs submitted at once."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = job_pb2_grpc.JobServiceStub(channel)
        metadata = (("authorization", f"Bearer {api_key}"),)
        done_before = sum(m.jobs_done for m in macs)
        cpu_0, commits_0 = meter.read()
        wall_0 = time.perf_counter()

        async def submit(i: int) -> None:
            await stub.SubmitJob(job_pb2.SubmitJobRequest(
                model=MODEL.model_id, prompt=f"job {i}", request_id=uuid.uuid4().hex,
                sampling=common_pb2.SamplingParams(max_tokens=1)), timeout=RPC_DEADLINE_S,
                metadata=metadata)

        await _bounded([(lambda i=i: submit(i)) for i in range(count)], 16)
        while sum(m.jobs_done for m in macs) - done_before < count:
            failed = [t for m in macs for t in m.tasks if t.done() and not t.cancelled() and t.exception()]
            if failed:
                raise RuntimeError("a simulated Mac failed (if its job was handed back, the jobs ran longer "
                                   "than the offline limit: raise --heartbeat-interval-ms)") from failed[0].exception()
            await asyncio.sleep(0.05)
        wall = time.perf_counter() - wall_0
        cpu_1, commits_1 = await meter.settled()  # the credits' release may trail the last receipt
    return count / wall, (cpu_1 - cpu_0) * 1e3 / count, (commits_1 - commits_0 - 1) / count


@contextlib.contextmanager
def _profiled(directory: Path | None, pid: int, name: str, per: float, unit: str) -> Iterator[None]:
    """Over the block: the coordinator's SQL per `unit` (bench.counted_coordinator) and py-spy's
    sampled stacks of all its threads (DIR/py-spy-NAME.txt), when asked for."""
    if directory is None:
        yield
        return
    spy = shutil.which("py-spy")
    sampler = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--format", "raw", "--nonblocking", "--gil", "--rate", "200",
         "--output", str(directory / f"py-spy-{name}.txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if spy else None
    try:
        with _counted(directory, name, per, unit):
            yield
    finally:
        if sampler is not None:
            sampler.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
            sampler.wait(30)


@contextlib.contextmanager
def _counted(directory: Path | None, name: str, per: float, unit: str) -> Iterator[None]:
    """The coordinator's SQL over the block (bench.counted_coordinator), logged per `unit`."""
    if directory is None:
        yield
        return
    output = directory / f"sql-{name}.json"
    _request(output, ".zero")
    yield
    _request(output, ".write")
    counts = json.loads(output.read_text())
    log.info("%s: %.1f SQL statements, %.1f transactions, %.1f commits per %s (all of the "
             "coordinator's, background loops included)", name, sum(counts["statements"].values()) / per,
             counts.get("transactions", 0) / per, counts.get("commits", 0) / per, unit)
    for statement, count in list(counts["statements"].items())[:25]:
        log.info("  %6.2f  %s", count / per, statement)


def _request(output: Path, suffix: str, timeout_s: float = 10.0) -> None:
    """Ask bench.counted_coordinator to zero or write its counts, and wait until it has."""
    request = output.with_name(output.name + suffix)
    request.touch()
    deadline = time.monotonic() + timeout_s
    while request.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not request.exists(), "the counted coordinator did not answer"


async def measure(args: argparse.Namespace, work: Path, url: str, admin: str, mode: str,
                  figures: Figures) -> None:
    upgrade_schema(url)
    db = Database(url)
    operator_key = None
    if mode == "shared":
        with db.transaction() as session:
            _, operator_key = create_operator_key(session, "fleet", "bench", time.time_ns() // 10**6)
    _, api_key = keys_cli.create(db, "bench-consumer", KeyLimits(), deposit_amount=10**18)
    db.dispose()
    limits = str(max(1_000, 2 * args.nodes))
    counted = {"program": "bench.counted_coordinator",
               "env": {OUTPUT_ENV: str(args.profile)}} if args.profile else {}
    child = start_coordinator(work / mode, database_url=url, tls=False, **counted,  # type: ignore[arg-type]
                              heartbeat_interval_ms=args.heartbeat_interval_ms,
                              trust_simulated_hardware=True, extra_args=(
                                  "--registrations-per-address-burst", limits,
                                  "--registrations-per-address-per-minute", limits,
                                  "--registrations-per-operator-burst", limits,
                                  "--registrations-per-operator-per-minute", limits))
    meter = Meter(child.process.pid, admin, url.rsplit("/", 1)[1])
    address = child.extra["address"]
    try:
        started = time.perf_counter()
        macs, channels = await _fleet(address, args.nodes, operator_key)
        log.info("%s: %d Macs registered with open streams in %.1f s", mode, len(macs),
                 time.perf_counter() - started)
        if mode == args.first_mode:
            # A round first: at 10,000 Macs registering takes longer than the offline limit, and
            # the Macs registered first would go offline (and come back) in the idle window.
            await _bounded([m.heartbeat for m in macs])
            await meter.quiet(len(macs))
            # And one more once the streams are quiet: at a 10 s interval, quieting 10,000 streams
            # took long enough that the window measured Macs going offline, not a coordinator idling.
            await _bounded([m.heartbeat for m in macs])
            reads_0 = meter.stream_table_reads()
            await meter.settled()  # the counts of the round before have landed
            cpu_0, commits_0 = meter.read()
            started_s = time.monotonic()
            with _profiled(args.profile, child.process.pid, f"idle-{mode}", args.idle_s, "second"):
                await asyncio.sleep(args.idle_s)
                cpu_1, _ = meter.read()
            _, commits_1 = await meter.settled()  # the window's own, once reported (nothing runs)
            span_s = time.monotonic() - started_s
            figures.stream_reads = meter.stream_table_reads() - reads_0
            figures.idle_cpu_share = (cpu_1 - cpu_0) / args.idle_s
            figures.idle_transactions_s = (commits_1 - commits_0 - 1) / span_s  # less our own read
            # One round unmeasured: a Mac silent longer than the offline limit (a slow idle phase
            # here) comes back with its first heartbeat, which is written at once.
            await _bounded([m.heartbeat for m in macs])
            cpu_0, commits_0 = await meter.settled()
            window_0 = time.monotonic()
            beats = args.heartbeat_rounds * len(macs)
            rebinds_0 = sum(m.rebinds for m in macs)
            with _profiled(args.profile, child.process.pid, f"heartbeats-{mode}", beats, "heartbeat"):
                for _ in range(args.heartbeat_rounds):
                    await _bounded([m.heartbeat for m in macs])
                cpu_1, _ = meter.read()
            cpu_window_s = time.monotonic() - window_0
            _, commits_1 = await meter.settled()
            window_s = time.monotonic() - window_0
            figures.heartbeat_cpu_ms = (cpu_1 - cpu_0) * 1e3 / beats
            figures.heartbeat_transactions = (commits_1 - commits_0) / beats
            # The same, less what the coordinator spends idle over as long (its background loops).
            figures.heartbeat_cpu_ms_net = max(0.0, (cpu_1 - cpu_0 - figures.idle_cpu_share * cpu_window_s)
                                               * 1e3 / beats)
            figures.heartbeat_transactions_net = max(0.0, (commits_1 - commits_0
                                                           - figures.idle_transactions_s * window_s) / beats)
            log.info("heartbeat rounds: %d beats in %.1f s, %d Macs bound again first (%d before)",
                     beats, cpu_window_s, sum(m.rebinds for m in macs) - rebinds_0, rebinds_0)
            log.info("idle: %.4f of a core, %.2f transactions/s; heartbeats: %.3f ms CPU, %.4f "
                     "transactions each", figures.idle_cpu_share, figures.idle_transactions_s,
                     figures.heartbeat_cpu_ms, figures.heartbeat_transactions)
            if args.comeback_round:
                await _comeback_round(args, macs, meter, figures, child.process.pid, mode)
        if args.jobs:
            # Every Mac fresh first: they send no heartbeats while the jobs run (that CPU is not
            # a job's), so a phase longer than the offline limit needs a longer interval.
            await _bounded([m.heartbeat for m in macs])
            with _profiled(args.profile, child.process.pid, mode, args.jobs, "job"):
                jobs_s, cpu_ms, transactions = await _jobs(address, api_key, args.jobs, meter, macs)
            figures.jobs_s[mode], figures.job_cpu_ms[mode] = jobs_s, cpu_ms
            figures.job_transactions[mode] = transactions
            log.info("%s operators: %.1f jobs/s wall, %.2f ms CPU, %.1f transactions per job", mode,
                     jobs_s, cpu_ms, transactions)
        await _close(macs, channels)
    finally:
        meter.close()
        child.stop()


async def _comeback_round(args: argparse.Namespace, macs: list[SimulatedMac], meter: Meter,
                          figures: Figures, pid: int, mode: str) -> None:
    """Every Mac silent past the offline limit (and the reaper's next pass), then one round: each
    beat a comeback, measured until its liveness batches and scheduling passes are done."""
    offline_s = 5 * args.heartbeat_interval_ms / 1000
    log.info("comeback round: every Mac silent for %.0f s first", offline_s + 2 * args.heartbeat_interval_ms / 1000)
    await asyncio.sleep(offline_s + 2 * args.heartbeat_interval_ms / 1000)
    cpu_0, commits_0 = await meter.settled()
    window_0 = time.monotonic()
    with _profiled(args.profile, pid, f"comebacks-{mode}", len(macs), "comeback"):
        await _bounded([m.heartbeat for m in macs])
        cpu_1, commits_1 = await meter.settled()  # the batches the comebacks woke, and their passes
    window_s = time.monotonic() - window_0
    figures.comeback_cpu_ms_net = max(0.0, (cpu_1 - cpu_0 - figures.idle_cpu_share * window_s) * 1e3 / len(macs))
    figures.comeback_transactions_net = max(0.0, (commits_1 - commits_0 - 1 - figures.idle_transactions_s * window_s)
                                            / len(macs))
    log.info("comebacks: %.3f ms CPU and %.4f transactions each, less the idle rate over %.1f s",
             figures.comeback_cpu_ms_net, figures.comeback_transactions_net, window_s)


def report(args: argparse.Namespace, figures: Figures) -> None:
    print(f"coordinator process, {args.nodes} simulated Macs, PostgreSQL; CPU time of the coordinator only")
    print(f"idle ({args.idle_s:.0f} s, streams open, no heartbeats): {figures.idle_cpu_share * 100:.2f}% "
          f"of a core, {figures.idle_transactions_s:.2f} PostgreSQL transactions/s (the background loops'), "
          f"{figures.stream_reads} scans of {', '.join(STREAM_TABLES)} (streams that polled would make "
          f"{args.nodes} each time; a few are the background loops')")
    print(f"heartbeats ({args.heartbeat_rounds} rounds, streamed, signed as the agent signs): {figures.heartbeat_cpu_ms:.3f} ms CPU "
          f"and {figures.heartbeat_transactions:.4f} transactions per heartbeat; less the idle rate over "
          f"the same time: {figures.heartbeat_cpu_ms_net:.3f} ms and {figures.heartbeat_transactions_net:.4f}")
    if figures.comeback_cpu_ms_net is not None:
        print(f"comebacks (one round from Macs counted offline, each beat a comeback): "
              f"{figures.comeback_cpu_ms_net:.3f} ms CPU and {figures.comeback_transactions_net:.4f} "
              f"transactions per heartbeat, less the idle rate over the same time")
    for mode in figures.jobs_s:
        print(f"jobs, {mode} operators ({args.jobs} 1-token jobs): {figures.jobs_s[mode]:.1f} jobs/s "
              f"wall, {figures.job_cpu_ms[mode]:.2f} ms coordinator CPU and "
              f"{figures.job_transactions[mode]:.1f} PostgreSQL transactions per job")
    beats_s = MACS_TARGET / INTERVAL_S_TARGET
    cores = beats_s * figures.heartbeat_cpu_ms / 1e3
    idle_cores = figures.idle_cpu_share * MACS_TARGET / max(1, args.nodes)
    transactions_s = beats_s * figures.heartbeat_transactions
    print(f"{MACS_TARGET:,} Macs at a {INTERVAL_S_TARGET:.0f} s interval: {beats_s:,.0f} heartbeats/s x "
          f"{figures.heartbeat_cpu_ms:.3f} ms = {cores:.2f} cores of heartbeats, + idle "
          f"{figures.idle_cpu_share * 100:.2f}% x {MACS_TARGET:,}/{args.nodes} = {idle_cores:.2f} cores "
          f"(idle scaled linearly, an upper bound: most of it is per-process, not per Mac)")
    print(f"  -> {cores + idle_cores:.2f} cores: {'fits' if cores + idle_cores <= PROCESSES_MAX else 'does NOT fit'}"
          f" on {PROCESSES_MAX} coordinator processes; PostgreSQL: {beats_s:,.0f} x "
          f"{figures.heartbeat_transactions:.4f} = {transactions_s:,.1f} transactions/s from heartbeats")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--heartbeat-rounds", type=int, default=3)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=10_000,
                        help="what the coordinator tells nodes (its offline limit is 5 of these)")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--comeback-round", action="store_true",
                        help="after the heartbeat rounds, let every Mac go offline (6 intervals) and "
                             "measure one round of comebacks")
    parser.add_argument("--operators", choices=("both", "distinct", "shared"), default="both")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="count the coordinator's SQL over idling, the heartbeats and the jobs (DIR/sql-*.json) "
                             "and, with py-spy installed, sample its stacks (DIR/py-spy-*.txt)")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    modes = ("distinct", "shared") if args.operators == "both" else (args.operators,)
    args.first_mode = modes[0]
    figures = Figures()
    with tempfile.TemporaryDirectory(prefix="mlxnet-bench-scale-") as tmp:
        for mode in modes:
            with fresh_database() as (url, admin):
                asyncio.run(measure(args, Path(tmp), url, admin, mode, figures))
    report(args, figures)


if __name__ == "__main__":
    main()
