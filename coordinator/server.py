"""The coordinator process: gRPC services, health, reflection and the supervised background loops."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2

from contracts.keyfile import signer_from_file
from coordinator.background import coordinator_loops, start_loops
from coordinator.errors import DatabaseUnavailable
from coordinator.clock import SystemClock
from coordinator.config import CoordinatorConfig
from coordinator.gateway.server import RunningGateway, start_gateway
from coordinator.live.pg_relay import PostgresRelay
from coordinator.money.epochs import EpochSettings, PayoutChains
from coordinator.placement.compiled import build_status
from coordinator.rpc.grpc_server import SERVICE_NAMES, GrpcServer
from coordinator.rpc.stream_limits import StreamLimits
from coordinator.service import CoordinatorService
from coordinator.storage.database import Database, upgrade_schema
from contracts.models import ModelSpec
from coordinator.verification.isolated import Checker
from coordinator.world.world import LazyChainReader
from coordinator.tls import ServerTls
from coordinator.verification.replay_check import Replayer
from contracts.tls import PlaintextRefused, is_loopback

log = logging.getLogger(__name__)

LOOP_STOP_WAIT_S = 30.0  # the longest stop waits for a background loop's pass to finish


@dataclass
class RunningCoordinator:
    server: GrpcServer  # grpc.aio on its own loop: open streams hold no thread
    service: CoordinatorService
    port: int
    stopping: threading.Event
    gateway: RunningGateway | None = None  # the HTTP API, when started with an http_port
    loops: list[threading.Thread] = field(default_factory=list)  # coordinator.background
    chains: PayoutChains | None = None  # where epoch roots are anchored (maybe its own anvil)

    def stop(self, grace_s: float = 2.0) -> None:
        self.stopping.set()
        self.service.core.completions_queued.set()  # the postings loop waits on it: let it see the stop
        self.service.nodes.comebacks_queued.set()  # and the liveness loop on this one
        if self.gateway is not None:
            self.gateway.stop()
        self.server.stop(grace_s).wait()
        for loop in self.loops:  # a pass under way finishes before its database goes
            loop.join(LOOP_STOP_WAIT_S)
        self._flush_liveness()
        if self.chains is not None:  # the coordinator's own anvil, if it started one
            self.chains.close()
        self.service.db.dispose()

    def _flush_liveness(self) -> None:
        """Write what the liveness batches have not yet (uptime credit above all), so a
        restart loses none of it; a database that is away loses only this last batch."""
        try:
            self.service.nodes.flush_liveness(everything=True)
        except DatabaseUnavailable as error:
            log.warning("stopping: the last liveness batch could not be written: %s", error)


def _follow_health(service: CoordinatorService, server: GrpcServer) -> None:
    """gRPC health says NOT_SERVING while a background loop cannot do its work."""
    def show(healthy: bool) -> None:
        status = (health_pb2.HealthCheckResponse.SERVING if healthy
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in (*SERVICE_NAMES, ""):
            server.set_health(name, status)
        if not healthy:
            log.warning("coordinator unhealthy: %s", "; ".join(
                f"{loop.name}: {loop.last_error}" for loop in service.health.loops() if not loop.healthy))
        else:
            log.info("coordinator healthy")

    service.health.on_change(show)


def _listener(tls: ServerTls | None):  # type: ignore[no-untyped-def]
    def listen(server: grpc.aio.Server, address: str) -> int:
        if tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, grpc.ssl_server_credentials([(tls.key_pem, tls.cert_pem)]))
    return listen


def _relay_across_coordinators(service: CoordinatorService, stopping: threading.Event) -> None:
    """On PostgreSQL, wake-ups go to every coordinator sharing the database (live/pg_relay.py)."""
    metrics = service.core.metrics
    if not service.config.database_url.startswith("postgresql"):
        service.notifier.set_relayed(True)  # SQLite: one coordinator; its own wake-ups are all
        metrics.event_bus_health(True)
        return

    def relayed(up: bool) -> None:
        metrics.event_bus_health(up)
        service.notifier.set_relayed(up)

    relay = PostgresRelay(service.config.database_url, service.core.hear_relayed, relayed,
                          metrics.event_bus_arrived)
    service.notifier.relay_to(relay.publish)
    relay.start(stopping)


def start(config: CoordinatorConfig, host: str = "127.0.0.1", port: int = 0,
          migrate: bool = True, http_port: int | None = None,
          replayer: Replayer | None = None, checker: Checker | None = None,
          pinned_models: tuple[ModelSpec, ...] = (), tls: ServerTls | None = None,
          stream_limits: StreamLimits = StreamLimits(),
          publisher_key: str | None = None) -> RunningCoordinator:
    """gRPC on port, and the HTTP gateway on http_port unless it is None (0: a free port).

    Both over TLS with tls; without it, plaintext, which only a loopback host may serve.

    With a checker (a replay child process, verification/isolated.py) or a replayer (in
    this process: tests), a verifier worker replays sampled jobs of the models it holds.
    pinned_models bind their ids to those weights in the catalog (the verifier's own copies).
    publisher_key signs anchors on the real network of config.chain (ledger.publisher_key loads it);
    a node there on another chain, or without the distributor, raises ChainSettingsError before serving.
    """
    if tls is None and not is_loopback(host):
        raise PlaintextRefused(f"plaintext on {host} refused: without TLS the coordinator "
                               "only listens on loopback")
    chains = PayoutChains(config.chain_dir, config.chain, publisher_key)
    chains.check_at_start()
    if migrate:
        upgrade_schema(config.database_url)
    service = CoordinatorService(Database(config.database_url), SystemClock(), config)
    if replayer is not None:
        service.checks.attach_verifier(replayer)
    if checker is not None:
        service.checks.attach_checker(checker)
    if pinned_models:
        service.nodes.pin_models(pinned_models, "coordinator-verifier")
    server = GrpcServer(service, f"{host}:{port}", _listener(tls), stream_limits)
    bound = server.start()
    _follow_health(service, server)
    stopping = threading.Event()
    _relay_across_coordinators(service, stopping)
    epoch_settings = EpochSettings.from_environment(config.node_offline_after_ms)
    ledger_signer = None if config.ledger_key_path is None else signer_from_file(config.ledger_key_path)
    # The scheduler's loop places the jobs queued before a restart at once.
    loops = start_loops(coordinator_loops(service, stopping, epoch_settings, chains.get, ledger_signer),
                        stopping, service.health)
    log.info("coordinator listening on %s:%d", host, bound)
    planner = build_status()  # compiled (setup.py) or plain Python: the same decisions, not the same cost
    if planner.stale:
        log.warning("placement planner: %s", planner.describe())
    else:
        log.info("placement planner: %s", planner.describe())
    # MLX World reads each epoch's root from the same chain the epochs loop anchors on.
    world_chain = LazyChainReader(chains.get)
    gateway = (start_gateway(service, host, http_port, tls=tls, chain=world_chain)
               if http_port is not None else None)
    return RunningCoordinator(server, service, bound, stopping, gateway, loops, chains)

