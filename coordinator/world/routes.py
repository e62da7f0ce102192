"""The HTTP edge of MLX World: the JSON API under /world/api, live events, and the web app.

Only this module touches FastAPI. Failures from the coordinator's error tree
become JSON errors here, through one table; the body says what to fix:

    {"error": {"type": "invalid_request", "message": "...", "param": "page"}}
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.staticfiles import StaticFiles

from contracts.limits import ERROR_CHARS_MAX, PAGE_DIGITS_MAX, ascii_int, shown
from coordinator.errors import (
    CoordinatorError, InvalidRequest, NotFound, PermissionDenied, Unauthenticated,
)
from coordinator.service import CoordinatorService
from coordinator.world.live import KEEPALIVE_S, STREAM_RETRY_MS, STREAM_S_MAX, TooManySubscribers
from coordinator.world.operator_keys import OperatorKey
from coordinator.world.world import EpochRootReader, World, chain_reader_from_environment

STATIC_DIR = Path(__file__).resolve().parent / "static"
REGION_BODY_BYTES_MAX = 1_024
# The app loads nothing from elsewhere and runs no inline script: node names are operators' text.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
_STATUS = (  # most specific first
    (InvalidRequest, 400, "invalid_request"),
    (Unauthenticated, 401, "unauthenticated"),
    (PermissionDenied, 403, "permission_denied"),
    (NotFound, 404, "not_found"),
)
_NO_STORE = {"Cache-Control": "no-store"}


def error_response(error: CoordinatorError) -> JSONResponse:
    status, kind = next(((code, name) for cls, code, name in _STATUS if isinstance(error, cls)),
                        (500, "internal"))
    body: dict[str, object] = {"type": kind, "message": shown(str(error), ERROR_CHARS_MAX)}
    if isinstance(error, InvalidRequest) and error.param:
        body["param"] = error.param
    headers = dict(_NO_STORE)
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="mlx-world-operator"'
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _json(work: Callable[[], dict[str, object]], private: bool = False) -> Response:
    try:
        body = work()
    except CoordinatorError as error:
        return error_response(error)
    headers = dict(_NO_STORE)
    if private:
        headers["Vary"] = "Authorization"
    return JSONResponse(body, headers=headers)


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def _page_headers() -> dict[str, str]:
    return {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


def build_router(world: World) -> APIRouter:
    router = APIRouter(prefix="/world", tags=["MLX World"])

    @router.get("", include_in_schema=False)
    def app_page() -> Response:
        return FileResponse(STATIC_DIR / "index.html", headers=_page_headers())

    @router.get("/", include_in_schema=False)
    def app_page_slash() -> Response:
        return RedirectResponse("/world", status_code=308)

    @router.get("/api/fleet", summary="One page of the fleet, filtered and sorted")
    def fleet_page(request: Request) -> Response:
        return _json(lambda: world.fleet_page(dict(request.query_params)))

    @router.get("/api/map", summary="Every filtered Mac with a published place, for the map")
    def fleet_map(request: Request) -> Response:
        return _json(lambda: world.map(dict(request.query_params)))

    @router.get("/api/fleet/facets", summary="The chips, tiers, modes and regions to filter by")
    def fleet_facets() -> Response:
        return _json(world.facets)

    @router.get("/api/pods", summary="Pods: members, cables (RDMA or TCP) and strategy")
    def pod_list() -> Response:
        return _json(world.pods)

    @router.get("/api/totals", summary="Network totals now, and their recent history")
    def totals() -> Response:
        return _json(world.totals)

    @router.get("/api/jobs/{job_id}", summary="Where a job ran and why, its timing, receipt and check")
    def job(job_id: str) -> Response:
        return _json(lambda: world.job(job_id))

    @router.get("/api/events", summary="Server-sent events: `fleet` and `totals`")
    async def events(request: Request) -> Response:
        return await _event_stream(world, request)

    _operator_routes(router, world)
    return router


def _operator_routes(router: APIRouter, world: World) -> None:
    def as_operator(request: Request, work: Callable[[OperatorKey], dict[str, object]]) -> Response:
        return _json(lambda: work(world.authenticate(_bearer(request))), private=True)

    @router.get("/api/operator/me", summary="The operator's Macs and balance (operator key)")
    def me(request: Request) -> Response:
        return as_operator(request, world.operator_summary)

    @router.get("/api/operator/jobs", summary="The operator's jobs with pay and check outcome")
    def operator_jobs(request: Request) -> Response:
        return as_operator(request, lambda key: world.operator_jobs(key, dict(request.query_params)))

    @router.get("/api/operator/epochs", summary="Earnings per epoch, Ultra-seat bonus apart")
    def operator_epochs(request: Request) -> Response:
        return as_operator(request, lambda key: world.operator_epochs(key, dict(request.query_params)))

    @router.get("/api/operator/proofs/{epoch}", summary="The Merkle proof of the epoch's payout")
    def operator_proof(request: Request, epoch: str) -> Response:
        number = ascii_int(epoch)
        if number is None:
            return error_response(InvalidRequest(
                f"epoch must be a whole number of at most {PAGE_DIGITS_MAX} digits 0-9", param="epoch"))
        return as_operator(request, lambda key: world.operator_proof(key, number))

    @router.put("/api/operator/nodes/{node_id}/region", summary="Declare a Mac's region")
    async def set_region(request: Request, node_id: str) -> Response:
        body = await request.body()
        try:
            region = _region_from_body(body)
        except InvalidRequest as error:
            return error_response(error)
        return await asyncio.to_thread(
            as_operator, request, lambda key: world.set_region(key, node_id, region))


def _region_from_body(body: bytes) -> str | None:
    if len(body) > REGION_BODY_BYTES_MAX:
        raise InvalidRequest(f"the body is over {REGION_BODY_BYTES_MAX} bytes; send {{\"region\": \"...\"}}")
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest('the body must be JSON like {"region": "Europe/Lisbon"}') from None
    if not isinstance(data, dict) or "region" not in data:
        raise InvalidRequest('the body must be JSON like {"region": "Europe/Lisbon"} '
                             '(null clears it)', param="region")
    region = data["region"]
    if region is not None and not isinstance(region, str):
        raise InvalidRequest("region must be text or null", param="region")
    return region


async def _event_stream(world: World, request: Request) -> Response:
    loop = asyncio.get_running_loop()
    try:
        subscriber = world.feed.subscribe(loop)
    except TooManySubscribers as error:
        return JSONResponse({"error": {"type": "unavailable", "message": str(error)}}, status_code=503,
                            headers={"Retry-After": "5", **_NO_STORE})

    async def stream() -> AsyncIterator[str]:
        deadline = time.monotonic() + STREAM_S_MAX
        try:
            yield f"retry: {STREAM_RETRY_MS}\n\n"
            for event in world.feed.current():
                yield event.encode()
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    event = await asyncio.wait_for(subscriber.queue.get(), min(KEEPALIVE_S, remaining))
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if event is None:
                    return
                yield event.encode()
        finally:
            world.feed.unsubscribe(subscriber)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def mount_world(app: FastAPI, service: CoordinatorService,
                chain: EpochRootReader | None = None) -> World:
    """Serve MLX World at /world on the gateway's app.

    Proofs are checked against the root read from `chain` (by default the real payout chain
    when MLXNET_PAYOUT_RPC_URL is set), else against the root recorded when it was anchored.

    Call .close() on the result (also at app.state.world) before stopping the server: it
    ends the live event streams, which would otherwise hold a graceful shutdown open.
    """
    return attach_world(app, World(service, chain if chain is not None else chain_reader_from_environment()))


def attach_world(app: FastAPI, world: World) -> World:
    """Serve this World's API, events and web app at /world on app."""
    app.include_router(build_router(world))
    app.mount("/world/static", StaticFiles(directory=STATIC_DIR), name="world-static")
    app.state.world = world
    return world
