"""The coordinator's side of ledger epochs: gather Ultra-seat availability, close due epochs, anchor roots.

The ledger stays free of coordinator tables: this module reads nodes, signed heartbeats
and jobs here and hands the ledger plain values (SeatInput, ExpectedCredit). The
coordinator process runs close_epochs_forever in a background thread; `mlxnet ledger
close-epoch` calls close_due_epoch once.

Settings come from the environment, so every coordinator of one database agrees:
MLXNET_EPOCH_LENGTH_S (default 3600). The chain comes from the coordinator's --chain-* flags
(ledger.chain_settings: RPC URL, chain id, distributor, publisher key, confirmations, gas caps),
or for tools from MLXNET_PAYOUT_RPC_URL, MLXNET_PAYOUT_DISTRIBUTOR and MLXNET_PAYOUT_PUBLISHER_KEY;
without a URL, the coordinator starts its own anvil (ledger.anvil) with its state in its data dir,
on a free port or MLXNET_ANVIL_PORT.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from contracts.hardware import ChipTier
from contracts.lending import LendingMode
from coordinator.model import JobStatus
from coordinator.storage import liveness_rows, node_rows
from coordinator.storage.database import Database
from coordinator.storage.tables import job_assignments, jobs
from ledger.api import (
    EPOCH_LENGTH_S_DEFAULT,
    AnvilProcess,
    ChainError,
    ChainSettings,
    ChainSettingsError,
    EpochClose,
    ExpectedCredit,
    HeadSigner,
    LedgerError,
    PayoutChainLike,
    SeatInput,
    anchor_pass,
    availability_bps,
    close_epoch,
    connect_chain,
    due_epoch,
    embedded_chain,
    in_process_chain,
    last_epoch,
)

log = logging.getLogger(__name__)

EPOCH_LENGTH_ENV = "MLXNET_EPOCH_LENGTH_S"
RPC_URL_ENV = "MLXNET_PAYOUT_RPC_URL"
DISTRIBUTOR_ENV = "MLXNET_PAYOUT_DISTRIBUTOR"
PUBLISHER_KEY_ENV = "MLXNET_PAYOUT_PUBLISHER_KEY"
ANVIL_PORT_ENV = "MLXNET_ANVIL_PORT"
ANVIL_PORT_DEFAULT = 0  # a free port, so coordinators can share a host (contracts.json records it)
CHECK_INTERVAL_S_MAX = 30.0
# A heartbeat proves the node online until the coordinator would call it offline.
HEARTBEAT_CREDIT_MS_DEFAULT = 10_000
JOB_LOOKBACK_S = 30 * 24 * 3600  # held credits post up to the hold limit after their job ran
JOBS_PAGE = 1_000


@dataclass(frozen=True)
class EpochSettings:
    length_s: int = EPOCH_LENGTH_S_DEFAULT
    heartbeat_credit_ms: int = HEARTBEAT_CREDIT_MS_DEFAULT

    @classmethod
    def from_environment(cls, heartbeat_credit_ms: int = HEARTBEAT_CREDIT_MS_DEFAULT) -> EpochSettings:
        text = os.environ.get(EPOCH_LENGTH_ENV, str(EPOCH_LENGTH_S_DEFAULT))
        if not text.isdigit() or int(text) <= 0:
            raise ValueError(f"{EPOCH_LENGTH_ENV} must be a positive number of seconds, not {text!r}")
        return cls(int(text), heartbeat_credit_ms)


def _seat_job_ids(session: Session, node_id: str, since_ms: int) -> tuple[str, ...]:
    query = (select(jobs.c.job_id).join(job_assignments, job_assignments.c.job_id == jobs.c.job_id)
             .where(job_assignments.c.node_id == node_id, jobs.c.status == JobStatus.COMPLETED.value,
                    jobs.c.finished_at_ms >= since_ms)
             .distinct().order_by(jobs.c.job_id))
    return tuple(session.execute(query).scalars())


def gather_seats(session: Session, number: int, settings: EpochSettings) -> list[SeatInput]:
    """Every node lent as an Ultra seat, with its availability over the epoch from signed heartbeats."""
    start_ms = number * settings.length_s * 1_000
    end_ms = start_ms + settings.length_s * 1_000
    seats = []
    for node in node_rows.all_nodes(session):
        times = liveness_rows.proof_times(session, node.node_id, start_ms, end_ms,
                                          settings.heartbeat_credit_ms,
                                          modes=frozenset({LendingMode.ULTRA_SEAT}))
        if node.lending.mode is not LendingMode.ULTRA_SEAT and not times:
            continue
        # Only a proven Ultra: a benchmark that fits the chip, and a challenge whose tokens passed
        # the coordinator's replay. A claim, or a fast answer alone, earns no bonus.
        verified = node.hardware.chip_tier is ChipTier.ULTRA and node.hardware_proven
        seats.append(SeatInput(
            node_id=node.node_id, operator_id=node.operator_id,
            availability_bps=availability_bps(times, start_ms, end_ms, settings.heartbeat_credit_ms),
            job_ids=_seat_job_ids(session, node.node_id, start_ms - JOB_LOOKBACK_S * 1_000),
            verified_ultra=verified))
    return seats


def close_due_epoch(db: Database, settings: EpochSettings, now_us: int | None = None,
                    signer: HeadSigner | None = None) -> EpochClose | None:
    """Close the latest finished epoch if it is not closed yet; None when nothing is due.

    With the coordinator's key (signer), the epoch's journal head is signed in the same transaction.
    """
    number = due_epoch(now_us if now_us is not None else time.time_ns() // 1_000, settings.length_s)
    with db.transaction() as session:
        last = last_epoch(session)
        if number < 0 or (last is not None and last.number >= number):
            return None
        result = close_epoch(session, number, gather_seats(session, number, settings),
                             length_s=settings.length_s, now_us=now_us, signer=signer)
    log.info("epoch %d: %s (root %s, total %s)", number, result.code,
             result.epoch.root if result.epoch else None, result.epoch.total if result.epoch else None)
    return result


def payout_chain_from_environment() -> PayoutChainLike:
    """The chain at MLXNET_PAYOUT_RPC_URL, or (without one) an in-process chain that lives as long as
    the process: for tests and one-off commands; the coordinator embeds anvil instead (PayoutChains)."""
    url = os.environ.get(RPC_URL_ENV)
    if not url:
        return in_process_chain()
    distributor = os.environ.get(DISTRIBUTOR_ENV)
    if not distributor:
        raise ValueError(f"{RPC_URL_ENV} needs {DISTRIBUTOR_ENV}, the distributor contract's address")
    return connect_chain(url, distributor, os.environ.get(PUBLISHER_KEY_ENV))


class PayoutChains:
    """Where the coordinator anchors: the network in `settings` (--chain-rpc-url), else
    MLXNET_PAYOUT_RPC_URL when set, else an anvil process of its own with its state in chain_dir
    (started on first use, so only once an epoch has a root to anchor, or a page reads one)."""

    def __init__(self, chain_dir: Path | None, settings: ChainSettings = ChainSettings(),
                 publisher_key: str | None = None) -> None:
        self._chain_dir, self._settings, self._key = chain_dir, settings, publisher_key
        self._process: AnvilProcess | None = None
        self._chain: PayoutChainLike | None = None
        self._lock = threading.Lock()  # the epochs loop and MLX World's pages both ask

    @property
    def settings(self) -> ChainSettings:
        return self._settings

    def get(self) -> PayoutChainLike:
        with self._lock:
            if self._chain is None:
                self._chain = self._connect()
            return self._chain

    def _connect(self) -> PayoutChainLike:
        settings = self._settings
        if not settings.embedded:
            assert settings.rpc_url is not None and settings.distributor is not None
            return connect_chain(settings.rpc_url, settings.distributor, self._key, chain_id=settings.chain_id,
                                 gas=settings.gas, receipt_timeout_s=settings.receipt_timeout_s)
        if os.environ.get(RPC_URL_ENV) or self._chain_dir is None:
            return payout_chain_from_environment()
        port = int(os.environ.get(ANVIL_PORT_ENV, str(ANVIL_PORT_DEFAULT)))
        self._process, chain = embedded_chain(self._chain_dir, port=port, gas=settings.gas,
                                              receipt_timeout_s=settings.receipt_timeout_s)
        return chain

    def check_at_start(self) -> None:
        """A real network is looked at once before the coordinator serves: a node on another chain, or
        no distributor at the address, raises ChainSettingsError; an unreachable one only delays anchoring."""
        if self._settings.embedded:
            return
        try:
            self.get()
        except ChainError as error:
            log.warning("the payout chain cannot be reached yet; anchoring waits for it: %s", error)

    def close(self) -> None:
        with self._lock:
            if self._process is not None:
                self._process.stop()
                self._process, self._chain = None, None


def anchor_closed_epochs(db: Database, chain: PayoutChainLike, confirmations: int = 1) -> int:
    """Anchor every closed epoch's root not yet on chain; how many were recorded (confirmations deep)."""
    with db.transaction() as session:
        return len(anchor_pass(session, chain, confirmations=confirmations).anchored)


class EpochCloser:
    """One pass of the epochs loop: close the epoch that ended (signed), then anchor any root not yet
    anchored. Anchoring is retried every pass until it succeeds, so an unreachable chain delays it and
    never loses an epoch; jobs never wait on it (it runs outside their transactions)."""

    def __init__(self, db: Database, settings: EpochSettings,
                 chain_factory: Callable[[], PayoutChainLike] = payout_chain_from_environment,
                 signer: HeadSigner | None = None, confirmations: int = 1) -> None:
        self._db, self._settings, self._signer = db, settings, signer
        self._confirmations = confirmations
        self._chain_factory = chain_factory
        self._chain: PayoutChainLike | None = None
        self._anchoring_due: bool | None = None  # unknown until the first pass reads the epochs

    @property
    def interval_s(self) -> float:
        return min(CHECK_INTERVAL_S_MAX, self._settings.length_s / 4)

    def step(self) -> None:
        if self._anchoring_due is None:
            with self._db.transaction() as session:  # a restart may find roots not anchored yet
                self._anchoring_due = last_epoch(session) is not None
        result = close_due_epoch(self._db, self._settings, signer=self._signer)
        self._anchoring_due = self._anchoring_due or (result is not None and result.epoch is not None
                                                      and result.epoch.root is not None)
        if self._anchoring_due:
            try:
                self._chain = self._chain or self._chain_factory()
                with self._db.transaction() as session:
                    waiting = anchor_pass(session, self._chain, confirmations=self._confirmations).waiting
            except ChainError as error:
                # An unreachable chain delays anchoring (the next pass retries); it must not mark
                # the coordinator unhealthy, or a balancer would stop sending it jobs.
                log.warning("anchoring delayed, retrying next pass: %s", error)
                return
            except ChainSettingsError as error:  # first reached now, the RPC serves another chain: loud, jobs go on
                log.error("anchoring stopped until the payout chain is fixed: %s", error)
                return
            self._anchoring_due = bool(waiting)  # roots short of their confirmations: look again


def close_epochs_forever(db: Database, stopping: threading.Event, settings: EpochSettings,
                         chain_factory: Callable[[], PayoutChainLike] = payout_chain_from_environment,
                         signer: HeadSigner | None = None) -> None:
    """EpochCloser's passes until stopping, logging a failed pass (for one-off tools and tests; the
    coordinator runs the same passes under coordinator.background's supervisor)."""
    closer = EpochCloser(db, settings, chain_factory, signer)
    while not stopping.wait(closer.interval_s):
        try:
            closer.step()
        except (LedgerError, OSError, ValueError) as error:
            # The next tick retries; a close is one transaction and anchoring is idempotent.
            log.error("epoch close or anchoring failed, will retry: %s", error)


def expected_credits(session: Session) -> Iterator[ExpectedCredit]:
    """What each verified receipt says, for the audit to recompute every operator credit."""
    after = ""
    while True:
        query = (select(jobs.c.job_id, jobs.c.model_id, jobs.c.prompt_tokens, jobs.c.completion_tokens,
                        job_assignments.c.node_id)
                 .join(job_assignments, (job_assignments.c.job_id == jobs.c.job_id)
                       & (job_assignments.c.attempt == jobs.c.attempt))
                 .where(jobs.c.receipt_verified.is_(True), jobs.c.job_id > after)
                 .order_by(jobs.c.job_id).limit(JOBS_PAGE))
        page = session.execute(query).all()
        for row in page:
            node = node_rows.node_by_id(session, row.node_id)
            spec = None if node is None else node.model(row.model_id)
            if node is not None and spec is not None:
                yield ExpectedCredit(row.job_id, node.operator_id, spec.parameter_count, row.prompt_tokens,
                                     row.completion_tokens)
        if len(page) < JOBS_PAGE:
            return
        after = page[-1].job_id
