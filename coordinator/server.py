"""The coordinator process: gRPC services, health, reflection and the reaper."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import grpc
from sqlalchemy.exc import DBAPIError

from contracts.keyfile import KeySigner, signer_from_file
from coordinator.clock import SystemClock
from coordinator.config import CoordinatorConfig
from coordinator.gateway.server import RunningGateway, start_gateway
from coordinator.live.pg_relay import PostgresRelay
from coordinator.money.epochs import EpochSettings, PayoutChains, close_epochs_forever
from coordinator.placement.compiled import build_status
from coordinator.rpc.grpc_server import GrpcServer
from coordinator.rpc.stream_limits import StreamLimits
from coordinator.service import VERIFICATION_TOPIC, CoordinatorService
from coordinator.storage.database import Database, upgrade_schema
from coordinator.tls import ServerTls
from coordinator.verification.replay_check import Replayer
from contracts.tls import PlaintextRefused, is_loopback

log = logging.getLogger(__name__)


@dataclass
class RunningCoordinator:
    server: GrpcServer  # grpc.aio on its own loop: open streams hold no thread
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
        service.notifier.wait(VERIFICATION_TOPIC, seen, service.core.poll_interval_s())


def _close_epochs(db: Database, stopping: threading.Event, settings: EpochSettings, chains: PayoutChains,
                  signer: KeySigner | None) -> None:
    """The epochs loop; the coordinator's own anvil, if it started one, stops with it."""
    try:
        close_epochs_forever(db, stopping, settings, chains.get, signer=signer)
    finally:
        chains.close()


def _listener(tls: ServerTls | None):  # type: ignore[no-untyped-def]
    def listen(server: grpc.aio.Server, address: str) -> int:
        if tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, grpc.ssl_server_credentials([(tls.key_pem, tls.cert_pem)]))
    return listen


def _relay_across_coordinators(service: CoordinatorService, stopping: threading.Event) -> None:
    """On PostgreSQL, wake-ups go to every coordinator sharing the database (live/pg_relay.py)."""
    if not service.config.database_url.startswith("postgresql"):
        service.notifier.set_relayed(True)  # SQLite: one coordinator; its own wake-ups are all
        return
    relay = PostgresRelay(service.config.database_url, service.notifier.notify_local,
                          service.notifier.set_relayed)
    service.notifier.relay_to(relay.publish)
    relay.start(stopping)


def start(config: CoordinatorConfig, host: str = "127.0.0.1", port: int = 0,
          migrate: bool = True, http_port: int | None = None,
          replayer: Replayer | None = None, tls: ServerTls | None = None,
          stream_limits: StreamLimits = StreamLimits()) -> RunningCoordinator:
    """gRPC on port, and the HTTP gateway on http_port unless it is None (0: a free port).

    Both over TLS with tls; without it, plaintext, which only a loopback host may serve.

    With a replayer, a verifier worker replays sampled jobs of the models it holds.
    """
    if tls is None and not is_loopback(host):
        raise PlaintextRefused(f"plaintext on {host} refused: without TLS the coordinator "
                               "only listens on loopback")
    if migrate:
        upgrade_schema(config.database_url)
    service = CoordinatorService(Database(config.database_url), SystemClock(), config)
    if replayer is not None:
        service.checks.attach_verifier(replayer)
    server = GrpcServer(service, f"{host}:{port}", _listener(tls), stream_limits)
    bound = server.start()
    stopping = threading.Event()
    _relay_across_coordinators(service, stopping)
    threading.Thread(target=_reap_forever, args=(service, stopping), daemon=True,
                     name="reaper").start()
    if service.checks.verifier is not None:
        threading.Thread(target=_verify_forever, args=(service, stopping), daemon=True,
                         name="verifier").start()
    epoch_settings = EpochSettings.from_environment(config.node_offline_after_ms)
    ledger_signer = None if config.ledger_key_path is None else signer_from_file(config.ledger_key_path)
    chains = PayoutChains(config.chain_dir)
    threading.Thread(target=_close_epochs, args=(service.db, stopping, epoch_settings, chains, ledger_signer),
                     daemon=True, name="epochs").start()
    service.run_scheduler()  # jobs queued before a restart are placed again
    log.info("coordinator listening on %s:%d", host, bound)
    planner = build_status()  # compiled (setup.py) or plain Python: the same decisions, not the same cost
    if planner.stale:
        log.warning("placement planner: %s", planner.describe())
    else:
        log.info("placement planner: %s", planner.describe())
    gateway = start_gateway(service, host, http_port, tls=tls) if http_port is not None else None
    return RunningCoordinator(server, service, bound, stopping, gateway)

