"""The coordinator's side of ledger epochs: gather Ultra-seat availability, close due epochs, anchor roots.

The ledger stays free of coordinator tables: this module reads nodes, signed heartbeats
and jobs here and hands the ledger plain values (SeatInput, ExpectedCredit). The
coordinator process runs close_epochs_forever in a background thread; `mlxnet ledger
close-epoch` calls close_due_epoch once.

Settings come from the environment, so every coordinator of one database agrees:
MLXNET_EPOCH_LENGTH_S (default 3600), and for a real chain MLXNET_PAYOUT_RPC_URL,
MLXNET_PAYOUT_DISTRIBUTOR and MLXNET_PAYOUT_PUBLISHER_KEY; without a URL, roots are
anchored on an in-process chain that lives as long as the process.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from contracts.hardware import ChipTier
from contracts.lending import LendingMode
from coordinator.model import JobStatus
from coordinator.storage import node_rows
from coordinator.storage.database import Database
from coordinator.storage.tables import job_assignments, jobs
from ledger.api import (
    EPOCH_LENGTH_S_DEFAULT,
    EpochClose,
    ExpectedCredit,
    LedgerError,
    PayoutChainLike,
    SeatInput,
    anchor_epochs,
    availability_bps,
    close_epoch,
    connect_chain,
    due_epoch,
    in_process_chain,
    last_epoch,
)

log = logging.getLogger(__name__)

EPOCH_LENGTH_ENV = "MLXNET_EPOCH_LENGTH_S"
RPC_URL_ENV = "MLXNET_PAYOUT_RPC_URL"
DISTRIBUTOR_ENV = "MLXNET_PAYOUT_DISTRIBUTOR"
PUBLISHER_KEY_ENV = "MLXNET_PAYOUT_PUBLISHER_KEY"
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
        times = node_rows.heartbeat_times(session, node.node_id, start_ms, end_ms,
                                        modes=frozenset({LendingMode.ULTRA_SEAT}))
        if node.lending.mode is not LendingMode.ULTRA_SEAT and not times:
            continue
        verified = node.hardware.chip_tier is ChipTier.ULTRA and node.benchmark_flag is None
        seats.append(SeatInput(
            node_id=node.node_id, operator_id=node.operator_id,
            availability_bps=availability_bps(times, start_ms, end_ms, settings.heartbeat_credit_ms),
            job_ids=_seat_job_ids(session, node.node_id, start_ms - JOB_LOOKBACK_S * 1_000),
            verified_ultra=verified))
    return seats


def close_due_epoch(db: Database, settings: EpochSettings, now_us: int | None = None) -> EpochClose | None:
    """Close the latest finished epoch if it is not closed yet; None when nothing is due."""
    number = due_epoch(now_us if now_us is not None else time.time_ns() // 1_000, settings.length_s)
    with db.transaction() as session:
        last = last_epoch(session)
        if number < 0 or (last is not None and last.number >= number):
            return None
        result = close_epoch(session, number, gather_seats(session, number, settings),
                             length_s=settings.length_s, now_us=now_us)
    log.info("epoch %d: %s (root %s, total %s)", number, result.code,
             result.epoch.root if result.epoch else None, result.epoch.total if result.epoch else None)
    return result


def payout_chain_from_environment() -> PayoutChainLike:
    url = os.environ.get(RPC_URL_ENV)
    if not url:
        return in_process_chain()
    distributor = os.environ.get(DISTRIBUTOR_ENV)
    if not distributor:
        raise ValueError(f"{RPC_URL_ENV} needs {DISTRIBUTOR_ENV}, the distributor contract's address")
    return connect_chain(url, distributor, os.environ.get(PUBLISHER_KEY_ENV))


def anchor_closed_epochs(db: Database, chain: PayoutChainLike) -> int:
    with db.transaction() as session:
        return len(anchor_epochs(session, chain))


def close_epochs_forever(db: Database, stopping: threading.Event, settings: EpochSettings,
                         chain_factory: Callable[[], PayoutChainLike] = payout_chain_from_environment) -> None:
    """The coordinator's background loop: close each epoch once it ends, then anchor its root."""
    interval_s = min(CHECK_INTERVAL_S_MAX, settings.length_s / 4)
    chain: PayoutChainLike | None = None
    while not stopping.wait(interval_s):
        try:
            result = close_due_epoch(db, settings)
            if result is not None and result.epoch is not None and result.epoch.root is not None:
                chain = chain or chain_factory()
                anchor_closed_epochs(db, chain)
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
