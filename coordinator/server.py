"""The coordinator process: gRPC services, health, reflection and the reaper."""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from sqlalchemy.exc import DBAPIError

from coordinator.clock import SystemClock
from coordinator.config import CoordinatorConfig
from coordinator.gateway.server import RunningGateway, start_gateway
from coordinator.money.epochs import EpochSettings, close_epochs_forever
from coordinator.placement.compiled import build_status
from coordinator.rpc.guard import EdgeGuard
from coordinator.rpc.job_servicer import JobServicer
from coordinator.rpc.node_servicer import NodeServicer
from coordinator.service import VERIFICATION_TOPIC, CoordinatorService
from coordinator.storage.database import Database, upgrade_schema
from coordinator.verification.replay_check import Replayer
from protos.mlxnet.v1 import job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc

log = logging.getLogger(__name__)

RPC_WORKERS_MAX = 128  # every open stream (node assignments, consumer streams) holds one
SERVICE_NAMES = (
    job_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    node_pb2.DESCRIPTOR.services_by_name["NodeService"].full_name,
)


@dataclass
class RunningCoordinator:
    server: grpc.Server
    service: CoordinatorService
    port: int
    stopping: threading.Event
    gateway: RunningGateway | None = None  # the HTTP API, when started with an http_port

    def stop(self, grace_s: float = 2.0) -> None:
        self.stopping.set()
        if self.gateway is not None:
            self.gateway.stop()
        self.server.stop(grace_s).wait()
        self.service.db.dispose()


def _reap_forever(service: CoordinatorService, stopping: threading.Event) -> None:
    interval_s = service.config.heartbeat_interval_ms / 1000
    while not stopping.wait(interval_s):
        service.nodes.reap_offline()
        service.money.close_ended()
        service.money.release_due_credits()


def _verify_forever(service: CoordinatorService, stopping: threading.Event) -> None:
    """The verifier worker's thread: wakes when a check is opened (or to poll another coordinator's)."""
    while not stopping.is_set():
        seen = service.notifier.version(VERIFICATION_TOPIC)
        try:
            service.checks.run()
        except DBAPIError as error:  # the database blinked: the checks wait in it for the next pass
            log.warning("verifier pass failed: %s", error)
        service.notifier.wait(VERIFICATION_TOPIC, seen, service.config.stream_poll_interval_s)


def start(config: CoordinatorConfig, host: str = "127.0.0.1", port: int = 0,
          migrate: bool = True, http_port: int | None = None,
          replayer: Replayer | None = None) -> RunningCoordinator:
    """gRPC on port, and the HTTP gateway on http_port unless it is None (0: a free port).

    With a replayer, a verifier worker replays sampled jobs of the models it holds.
    """
    if migrate:
        upgrade_schema(config.database_url)
    service = CoordinatorService(Database(config.database_url), SystemClock(), config)
    if replayer is not None:
        service.checks.attach_verifier(replayer)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=RPC_WORKERS_MAX),
                         interceptors=[EdgeGuard()])  # every request checked at the door
    job_pb2_grpc.add_JobServiceServicer_to_server(JobServicer(service), server)
    node_pb2_grpc.add_NodeServiceServicer_to_server(NodeServicer(service), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in (*SERVICE_NAMES, ""):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"could not listen on {host}:{port}; is the port in use?")
    server.start()
    stopping = threading.Event()
    threading.Thread(target=_reap_forever, args=(service, stopping), daemon=True,
                     name="reaper").start()
    if service.checks.verifier is not None:
        threading.Thread(target=_verify_forever, args=(service, stopping), daemon=True,
                         name="verifier").start()
    epoch_settings = EpochSettings.from_environment(config.node_offline_after_ms)
    threading.Thread(target=close_epochs_forever, args=(service.db, stopping, epoch_settings),
                     daemon=True, name="epochs").start()
    service.run_scheduler()  # jobs queued before a restart are placed again
    log.info("coordinator listening on %s:%d", host, bound)
    planner = build_status()  # compiled (setup.py) or plain Python: the same decisions, not the same cost
    if planner.stale:
        log.warning("placement planner: %s", planner.describe())
    else:
        log.info("placement planner: %s", planner.describe())
    gateway = start_gateway(service, host, http_port) if http_port is not None else None
    return RunningCoordinator(server, service, bound, stopping, gateway)

