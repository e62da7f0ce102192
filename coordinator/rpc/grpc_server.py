"""The gRPC server on grpc.aio, on an event loop of its own thread.

An open stream is a suspended coroutine, not a thread, so idle streams cost only memory;
blocking service calls go to coordinator.rpc.offload's pools. The object answers what a
grpc.Server does for the process: stop(grace) and wait_for_termination().
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator.rpc.guard import EdgeGuard
from coordinator.rpc.job_servicer import JobServicer
from coordinator.rpc.node_servicer import NodeServicer
from coordinator.rpc.offload import Offload, PoolSizes
from coordinator.rpc.stream_limits import OpenStreams, StreamLimits
from coordinator.service import CoordinatorService
from protos.mlxnet.v1 import job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc

START_TIMEOUT_S = 30.0
SERVICE_NAMES = (
    job_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    node_pb2.DESCRIPTOR.services_by_name["NodeService"].full_name,
)

# (server, "host:port") -> the bound port, 0 when it could not listen: the TLS choice.
Listen = Callable[[grpc.aio.Server, str], int]


class GrpcServer:
    def __init__(self, service: CoordinatorService, address: str, listen: Listen,
                 limits: StreamLimits = StreamLimits(), pools: PoolSizes = PoolSizes()) -> None:
        self.offload = Offload(service.notifier, pools)
        self.streams = OpenStreams(limits)
        self._service = service
        self._address = address
        self._listen = listen
        self._loop: asyncio.AbstractEventLoop | None = None  # set once serving
        self._stop_requested: asyncio.Event | None = None
        self._grace_s: float | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._started = threading.Event()
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._run, name="grpc", daemon=True)

    def start(self) -> int:
        """Listen and serve; returns the bound port. Raises OSError when it cannot listen."""
        self._thread.start()
        self._started.wait(START_TIMEOUT_S)
        if self._error is not None:
            raise self._error
        if not self._started.is_set():
            raise OSError(f"the gRPC server did not start on {self._address}")
        return self.port

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # noqa: BLE001 (handed to start(), which raises it)
            self._error = error
            self._started.set()
        finally:
            self.offload.close()
            self._stopped.set()

    async def _serve(self) -> None:
        server = grpc.aio.server(interceptors=[EdgeGuard()],  # every request checked at the door
                                 options=self.streams.limits.server_options())
        job_pb2_grpc.add_JobServiceServicer_to_server(
            JobServicer(self._service, self.offload, self.streams), server)
        node_pb2_grpc.add_NodeServiceServicer_to_server(
            NodeServicer(self._service, self.offload, self.streams), server)
        health_servicer = self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        for name in (*SERVICE_NAMES, ""):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
             reflection.SERVICE_NAME), server)
        self.port = self._listen(server, self._address)
        if self.port == 0:
            raise OSError(f"could not listen on {self._address}; is the port in use?")
        await server.start()
        self._server = server
        self._stop_requested = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._started.set()
        await self._stop_requested.wait()
        await server.stop(self._grace_s)

    def stop(self, grace_s: float | None) -> threading.Event:
        """Stop accepting calls, let running ones finish within grace_s; the event is set once stopped."""
        loop, requested = self._loop, self._stop_requested
        if loop is not None and requested is not None:
            self._grace_s = grace_s
            try:
                loop.call_soon_threadsafe(requested.set)
            except RuntimeError:  # the loop ended meanwhile
                pass
        return self._stopped

    def set_health(self, service_name: str, status: int) -> None:
        """From any thread: what gRPC health checking answers for service_name ("" for all)."""
        loop = self._loop
        if self._health is not None and loop is not None and not loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._health.set(service_name, status), loop)

    def wait_for_termination(self, timeout_s: float | None = None) -> bool:
        return self._stopped.wait(timeout_s)
