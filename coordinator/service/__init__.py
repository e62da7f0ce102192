"""The coordinator's use cases, one transaction each, with wake-ups after commit.

    core.py            what every use case shares: database, clock, settings, live index, wake-ups,
                       and the scheduler's pass
    consumer_jobs.py   service.jobs: authenticate a consumer; submit, read, stream, cancel a job
    node_sessions.py   service.nodes: register, heartbeat, assignments, tokens, receipts, failures
    checks.py          service.checks: the verifier's replays, and what checks found
    peer_checks.py     service.peers: check jobs run by peer nodes, their results and disputes
    money.py           service.money: the sweeps that settle ended jobs and release held credits
    spot_checks.py     service.spot_checks: challenge benchmarks for verified Macs at random times

The gRPC servicers and the HTTP gateway translate their wire types to these calls and back;
nothing here knows about gRPC or HTTP.
"""

from __future__ import annotations

import random

from coordinator.clock import Clock
from coordinator.config import CoordinatorConfig
from coordinator.live.notifier import Notifier
from coordinator.scheduling.scheduler import SchedulingPass
from coordinator.service.checks import Checks
from coordinator.service.consumer_jobs import ConsumerJobs, JobView, Watch
from coordinator.service.core import VERIFICATION_TOPIC, ServiceCore
from coordinator.service.money import Money
from coordinator.service.node_sessions import NodeSessions
from coordinator.service.peer_checks import PeerChecks
from coordinator.service.spot_checks import SpotChecks
from coordinator.storage.database import Database

__all__ = ["VERIFICATION_TOPIC", "CoordinatorService", "JobView", "Watch"]


class CoordinatorService:
    """The use cases of one coordinator process, over one database."""

    def __init__(self, db: Database, clock: Clock, config: CoordinatorConfig,
                 notifier: Notifier | None = None, draws: random.Random | None = None) -> None:
        self.core = ServiceCore(db, clock, config, notifier, draws)
        self.checks = Checks(self.core)
        self.jobs = ConsumerJobs(self.core)
        self.nodes = NodeSessions(self.core, self.checks)
        self.money = Money(self.core)
        self.peers = PeerChecks(self.core)
        self.spot_checks = SpotChecks(self.core, self.core.draws)
        self.db, self.clock, self.config = db, clock, config
        self.notifier, self.fleet, self.health = self.core.notifier, self.core.fleet, self.core.health

    def run_scheduler(self) -> SchedulingPass:
        return self.core.run_scheduler()

    def rebuild_index_aside(self) -> bool:
        return self.core.rebuild_index_aside()
