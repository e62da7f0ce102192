"""The OpenAI-compatible HTTP API, as a FastAPI app over the coordinator's service.

    POST /v1/chat/completions      POST /v1/completions          POST /v1/messages (Anthropic's)
    POST /v1/responses (OpenAI's Responses API)
    GET  /v1/models                GET  /v1/models/{model}
    GET  /v1/jobs/{id}             GET  /v1/jobs/{id}/receipt      POST /v1/jobs/{id}/cancel

The spec is served at /openapi.json. Every request carries `Authorization: Bearer
<key>` unless the coordinator allows anonymous access.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from coordinator.errors import CoordinatorError, Unauthenticated, UnknownModel
from coordinator.gateway import jobs as views
from coordinator.gateway.anthropic import add_messages_route
from coordinator.gateway.responses import add_responses_route
from coordinator.gateway.bridge import Bridge
from coordinator.gateway.completions import run_completion
from coordinator.gateway.errors import (
    JOB_ID_HEADER,
    JobError,
    on_coordinator_error,
    on_http_exception,
    on_job_error,
    on_validation_error,
)
from coordinator.gateway.request_ids import RequestIds
from coordinator.gateway.requests import chat_submission, completion_submission
from coordinator.gateway.schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    ErrorResponse,
    JobOut,
    ModelList,
    ModelOut,
    ReceiptOut,
)
from coordinator.money.api_keys import Caller
from coordinator.service import JobView
from coordinator.world import mount_world

API_VERSION = "1.0.0"
IDEMPOTENCY_KEY_CHARS_MAX = 128
HEALTH_RETRY_AFTER_S = 2
_ERROR = {"model": ErrorResponse}
_COMMON_ERRORS = {400: _ERROR, 401: _ERROR, 404: _ERROR}
_GENERATION_ERRORS = {
    **_COMMON_ERRORS, 402: _ERROR, 413: _ERROR, 429: _ERROR, 502: _ERROR,
    503: {**_ERROR, "headers": {"Retry-After": {"schema": {"type": "integer"},
                                                "description": "seconds to wait"}}},
}
_STREAM_CONTENT = {"text/event-stream": {"schema": {"type": "string"}, "description":
                   "with stream=true: `data: {chunk}` events, then `data: [DONE]`"}}
_bearer = HTTPBearer(auto_error=False, description="an MLX Network API key (mlxk_...)")


async def _key_text(request: Request, credentials: Annotated[
        HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str | None:
    """The bearer key as sent (checked against the database by whoever uses it)."""
    if credentials is None and request.headers.get("authorization"):
        raise Unauthenticated("send the API key as `Authorization: Bearer <key>`")
    return credentials.credentials if credentials is not None else None


async def _caller(request: Request, key: Annotated[str | None, Depends(_key_text)]) -> Caller:
    bridge: Bridge = request.app.state.bridge
    return await bridge.call(bridge.service.jobs.authenticate_consumer, key)


Authenticated = Annotated[Caller, Depends(_caller)]
# Generation checks the key on the worker thread that submits the job: one hop, not two.
KeyText = Annotated[str | None, Depends(_key_text)]
IdempotencyKey = Annotated[str, Header(alias="idempotency-key", max_length=IDEMPOTENCY_KEY_CHARS_MAX,
                                      description="a retry with the same key returns the same job")]


def create_app(bridge: Bridge, chain: Any = None) -> FastAPI:
    """chain: where MLX World reads epoch roots (an EpochRootReader); None: MLXNET_PAYOUT_RPC_URL's, if set."""
    service = bridge.service
    app = FastAPI(title="MLX Network API", version=API_VERSION,
                  description="OpenAI-compatible inference on Macs lent to MLX Network, with "
                              "metered API keys, verifiable receipts and job records.")
    app.state.bridge = bridge
    app.add_middleware(RequestIds)  # X-Request-Id, and the id on the request's log lines
    app.add_exception_handler(CoordinatorError, on_coordinator_error)
    app.add_exception_handler(JobError, on_job_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)

    @app.post("/v1/chat/completions", response_model=ChatCompletion,
              responses={200: {"content": _STREAM_CONTENT}, **_GENERATION_ERRORS})
    async def chat_completions(body: ChatCompletionRequest, request: Request, key: KeyText,
                               idempotency_key: IdempotencyKey = "") -> Response:
        return await run_completion(bridge, request, key,
                                    lambda who: chat_submission(body, who, idempotency_key))

    @app.post("/v1/completions", response_model=Completion,
              responses={200: {"content": _STREAM_CONTENT}, **_GENERATION_ERRORS})
    async def completions(body: CompletionRequest, request: Request, key: KeyText,
                          idempotency_key: IdempotencyKey = "") -> Response:
        return await run_completion(bridge, request, key,
                                    lambda who: completion_submission(body, who, idempotency_key))

    @app.get("/v1/models", response_model=ModelList, responses=_COMMON_ERRORS)
    async def list_models(who: Authenticated, include_busy: Annotated[bool, Query(
            alias="all", description="also list models no Mac can take a job for right now"
    )] = False) -> dict:
        capacities = await bridge.call(service.jobs.capacity)
        return {"object": "list", "data": [views.model_json(c) for c in capacities
                                           if include_busy or c.macs_available > 0]}

    @app.get("/v1/models/{model_id:path}", response_model=ModelOut, responses=_COMMON_ERRORS)
    async def get_model(model_id: str, who: Authenticated) -> dict:
        capacities = await bridge.call(service.jobs.capacity)
        found = next((c for c in capacities if c.spec.model_id == model_id), None)
        if found is None:
            raise UnknownModel(f"model {model_id!r} is not served by any node")
        return views.model_json(found)

    async def job_response(view: JobView, who: Caller) -> JSONResponse:
        cost = await bridge.call(service.jobs.cost, view.job.job_id, who)
        pod = await bridge.call(service.nodes.pod_assignment, view.job)
        body = views.job_json(view, cost, pod[0].pod_id if pod else None)
        return JSONResponse(body, headers={JOB_ID_HEADER: view.job.job_id})

    @app.get("/v1/jobs/{job_id}", response_model=JobOut, responses=_COMMON_ERRORS)
    async def get_job(job_id: str, who: Authenticated) -> JSONResponse:
        return await job_response(await bridge.call(service.jobs.get, job_id, who), who)

    @app.get("/v1/jobs/{job_id}/receipt", response_model=ReceiptOut, responses=_COMMON_ERRORS)
    async def get_receipt(job_id: str, who: Authenticated) -> JSONResponse:
        view = await bridge.call(service.jobs.get, job_id, who)
        return JSONResponse(views.receipt_json(view), headers={JOB_ID_HEADER: job_id})

    @app.post("/v1/jobs/{job_id}/cancel", response_model=JobOut,
              responses={**_COMMON_ERRORS, 409: _ERROR})
    async def cancel_job(job_id: str, who: Authenticated) -> JSONResponse:
        return await job_response(await bridge.call(service.jobs.cancel, job_id, who), who)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        """200 while every background loop works; 503 with Retry-After while one cannot."""
        loops = service.health.loops()
        body = {"status": "ok" if service.health.healthy else "unhealthy", "loops": [
            {"name": loop.name, "healthy": loop.healthy, "failures": loop.failures,
             "failing_since_ms": loop.failing_since_ms, "last_error": loop.last_error}
            for loop in loops]}
        if service.health.healthy:
            return JSONResponse(body)
        return JSONResponse(body, status_code=503, headers={"retry-after": str(HEALTH_RETRY_AFTER_S)})

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """Prometheus metrics (coordinator.metrics); the network's figures are read at each scrape."""
        body = await bridge.call(service.core.metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    add_messages_route(app, bridge, _GENERATION_ERRORS)  # POST /v1/messages, Anthropic's API
    add_responses_route(app, bridge, _GENERATION_ERRORS, _key_text)  # POST /v1/responses
    mount_world(app, service, chain)  # MLX World: /world and /world/api (coordinator/world)
    return app
