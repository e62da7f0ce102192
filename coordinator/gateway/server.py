"""Serves the gateway with uvicorn on a thread of the coordinator process."""

from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass
from typing import Any

import uvicorn

from contracts.limits import HTTP_HEADER_BYTES_MAX, HTTP_HEADER_READ_S
from contracts.tls import PlaintextRefused, is_loopback
from coordinator.gateway.app import create_app
from coordinator.gateway.bridge import Bridge
from coordinator.gateway.guard import BodyLimit, header_deadline_protocol
from coordinator.service import CoordinatorService
from coordinator.tls import ServerTls

log = logging.getLogger(__name__)

SERVICE_CALLS_MAX = 64  # blocking service calls in flight at once
STREAMS_MAX = 512  # jobs streamed at once; more are refused with 503
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this


class _Server(uvicorn.Server):
    """uvicorn's server, with an event set once it listens (or has given up)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()

    def serve_forever(self, listener: socket.socket) -> None:
        try:
            self.run(sockets=[listener])
        finally:
            self.ready.set()


@dataclass
class RunningGateway:
    server: uvicorn.Server
    thread: threading.Thread
    bridge: Bridge
    host: str
    port: int

    def stop(self) -> None:
        world = getattr(self.server.config.app.app.state, "world", None)  # inside BodyLimit
        if world is not None:  # end MLX World's live streams so shutdown need not wait them out
            world.close()
        self.server.should_exit = True
        self.thread.join(STOP_TIMEOUT_S)
        self.bridge.close()


def start_gateway(service: CoordinatorService, host: str = "127.0.0.1",
                  port: int = 0, streams_max: int = STREAMS_MAX,
                  header_read_s: float = HTTP_HEADER_READ_S,
                  tls: ServerTls | None = None, chain: Any = None) -> RunningGateway:
    """Listen on host:port (0 picks a free port) and serve until stop(), over TLS with tls.

    streams_max: jobs streamed at once; more are refused with 503.
    chain: where MLX World reads epoch roots (the coordinator's payout chain).
    header_read_s: a connection that sends no whole request head in this long is closed."""
    if tls is None and not is_loopback(host):
        raise PlaintextRefused(f"plaintext HTTP on {host} refused: only loopback may go without TLS")
    bridge = Bridge(service, SERVICE_CALLS_MAX, streams_max)
    listener = socket.create_server((host, port), reuse_port=False)
    app = create_app(bridge, chain)
    config = uvicorn.Config(BodyLimit(app), log_config=None, access_log=False,
                            timeout_graceful_shutdown=int(STOP_TIMEOUT_S), lifespan="off",
                            http=header_deadline_protocol(header_read_s),
                            h11_max_incomplete_event_size=HTTP_HEADER_BYTES_MAX,
                            timeout_keep_alive=KEEP_ALIVE_S,
                            ssl_certfile=str(tls.cert_path) if tls else None,
                            ssl_keyfile=str(tls.key_path) if tls else None)
    server = _Server(config)
    thread = threading.Thread(target=server.serve_forever, args=(listener,), name="gateway",
                              daemon=True)
    thread.start()
    server.ready.wait(START_TIMEOUT_S)
    if not server.started:
        raise OSError(f"the HTTP gateway did not start on {host}:{port}; see the log")
    bound = listener.getsockname()[1]
    log.info("gateway listening on %s:%d", host, bound)
    return RunningGateway(server, thread, bridge, host, bound)
