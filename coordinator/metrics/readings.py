"""The network's figures, read from the database at scrape time: one read transaction per scrape.

What the database already knows is read rather than counted, so the figures are the network's
(every coordinator over one database reports the same; use max() across coordinators, not
sum()) and survive restarts. Each query is an aggregate over an index or a small table:
jobs waiting and running by model, Macs by state, checks by outcome, operator credits, and the
ledger's transfer count (its chain head's sequence).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import case, func, or_, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from coordinator.metrics import names
from coordinator.model import JobStatus
from coordinator.storage.tables import job_assignments, jobs, nodes
from coordinator.verification.store import CheckStatus, CreditState, job_checks
from ledger import api as ledger

log = logging.getLogger(__name__)

_WAITING = (JobStatus.QUEUED.value,)
_RUNNING = (JobStatus.ASSIGNED.value, JobStatus.RUNNING.value)


@dataclass(frozen=True)
class NetworkReading:
    waiting_by_model: dict[str, int]
    running_by_model: dict[str, int]
    macs_by_state: dict[str, int]  # every state of names.MAC_STATES, zeros included
    checks_by_outcome: dict[str, int]  # every CheckStatus, zeros included
    credits_held_base_units: int
    credits_posted_base_units: int
    credits_voided_base_units: int
    ledger_transfers: int


def _jobs_by_model(session: Session, statuses: tuple[str, ...]) -> dict[str, int]:
    rows = session.execute(select(jobs.c.model_id, func.count()).where(
        jobs.c.status.in_(statuses)).group_by(jobs.c.model_id))
    return {model_id: int(count) for model_id, count in rows}


def _macs_by_state(session: Session, now_ms: int, offline_after_ms: int) -> dict[str, int]:
    offline = or_(nodes.c.last_heartbeat_ms < now_ms - offline_after_ms, nodes.c.left_at_ms.is_not(None))
    working = nodes.c.node_id.in_(select(job_assignments.c.node_id).where(job_assignments.c.active.is_(True)))
    state = case((offline, names.MAC_OFFLINE), (working, names.MAC_WORKING),
                 (nodes.c.owner_active.is_(True), names.MAC_OWNER_BACK), else_=names.MAC_IDLE)
    counted = dict.fromkeys(names.MAC_STATES, 0)
    for name, count in session.execute(select(state, func.count()).group_by(state)):
        counted[name] = int(count)
    return counted


def _checks_by_outcome(session: Session) -> dict[str, int]:
    counted = {status.value: 0 for status in CheckStatus}
    for status, count in session.execute(select(job_checks.c.status, func.count())
                                         .group_by(job_checks.c.status)):
        counted[status] = int(count)
    return counted


def read_network(session: Session, now_ms: int, offline_after_ms: int) -> NetworkReading:
    posted, held = ledger.operator_credit_totals(session)
    voided = session.execute(select(func.sum(job_checks.c.operator_credit)).where(
        job_checks.c.credit_state == CreditState.VOIDED.value)).scalar_one()
    transfers = ledger.chain_head(session).last_sequence
    return NetworkReading(
        waiting_by_model=_jobs_by_model(session, _WAITING),
        running_by_model=_jobs_by_model(session, _RUNNING),
        macs_by_state=_macs_by_state(session, now_ms, offline_after_ms),
        checks_by_outcome=_checks_by_outcome(session),
        credits_held_base_units=held, credits_posted_base_units=posted,
        credits_voided_base_units=int(voided or 0), ledger_transfers=transfers)


def metric_families(reading: NetworkReading) -> Iterator[Metric]:
    """The reading as Prometheus metric families."""
    for name, doc, by_model in (
            (names.NUM_REQUESTS_WAITING, "Requests waiting in the queue for a Mac.", reading.waiting_by_model),
            (names.NUM_REQUESTS_RUNNING, "Requests assigned to a Mac or running.", reading.running_by_model)):
        family = GaugeMetricFamily(name, doc, labels=["model_name"])
        for model_id, count in sorted(by_model.items()):
            family.add_metric([model_id], count)
        yield family
    macs = GaugeMetricFamily(names.MACS, "Macs in the network by state (working, idle, owner_back, "
                             "offline).", labels=["state"])
    for state, count in reading.macs_by_state.items():
        macs.add_metric([state], count)
    yield macs
    checks = CounterMetricFamily(names.VERIFICATION_CHECKS, "Completed jobs' proof checks by "
                                 "outcome (waiting, passed, failed, unchecked).", labels=["outcome"])
    for outcome, count in reading.checks_by_outcome.items():
        checks.add_metric([outcome], count)
    yield checks
    yield GaugeMetricFamily(names.CREDITS_HELD, "Operator credits held now, pending their check, "
                            "in base units.", value=reading.credits_held_base_units)
    yield CounterMetricFamily(names.CREDITS_POSTED, "Operator credits posted, all time, in base "
                              "units.", value=reading.credits_posted_base_units)
    yield CounterMetricFamily(names.CREDITS_VOIDED, "Operator credits voided by failed checks, all "
                              "time, in base units.", value=reading.credits_voided_base_units)
    yield CounterMetricFamily(names.LEDGER_TRANSFERS, "Ledger transfers recorded, all time.",
                              value=reading.ledger_transfers)


class NetworkCollector(Collector):
    """Reads the network at every scrape; a failed read leaves those figures out and counts it."""

    def __init__(self, read: Callable[[], NetworkReading]) -> None:
        self._read = read
        self._failures = 0

    def collect(self) -> Iterator[Metric]:
        try:
            reading = self._read()
        except DBAPIError as error:  # the database blinked: this scrape goes without
            self._failures += 1
            log.warning("metrics: reading the network failed: %s", error)
            reading = None
        yield CounterMetricFamily(names.READINGS_FAILED, "Scrapes whose reading of the database "
                                  "failed (their network figures are missing).", value=self._failures)
        if reading is not None:
            yield from metric_families(reading)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # not read at registration: the database may not be up yet
