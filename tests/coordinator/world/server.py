"""MLX World on a real uvicorn server on port 0, in a thread, for the HTTP and browser tests."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from coordinator.service import CoordinatorService
from coordinator.world import mount_world
from coordinator.world.world import EpochRootReader, World

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class _Server(uvicorn.Server):
    """uvicorn's server, with an event set once it listens or has failed to."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()


@contextlib.contextmanager
def serve_world(service: CoordinatorService,
                chain: EpochRootReader | None = None) -> Iterator[tuple[str, World]]:
    """(base URL, the World) of a server that stops when the block ends."""
    app = FastAPI()
    world = mount_world(app, service, chain)
    listener = socket.create_server(("127.0.0.1", 0))
    server = _Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                                    timeout_graceful_shutdown=int(STOP_TIMEOUT_S)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True,
                              name="world-test-server")
    thread.start()
    try:
        assert server.ready.wait(START_TIMEOUT_S) and server.started, "the test server did not start"
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", world
    finally:
        world.close()
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S)
        listener.close()
