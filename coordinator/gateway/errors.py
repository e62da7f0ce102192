"""The one table from coordinator errors to HTTP statuses, in OpenAI's error format.

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
               "code": null}}

Request bodies that fail validation answer 400 naming the field, not FastAPI's 422.
Anthropic's route (/v1/messages) answers the same statuses in Anthropic's format:

    {"type": "error", "error": {"type": "invalid_request_error", "message": "..."}}
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from contracts.limits import ERROR_CHARS_MAX, shown
from coordinator import errors
from coordinator.gateway.fields import refusal_message, refused_field

log = logging.getLogger(__name__)
JOB_ID_HEADER = "x-mlxnet-job-id"


@dataclass(frozen=True)
class HttpError:
    status: int
    type: str  # OpenAI's error type
    code: str | None


HTTP_FOR_ERROR: dict[type[errors.CoordinatorError], HttpError] = {
    errors.PromptTooLong: HttpError(413, "invalid_request_error", "context_length_exceeded"),
    errors.InvalidRequest: HttpError(400, "invalid_request_error", None),
    errors.UnknownModel: HttpError(404, "invalid_request_error", "model_not_found"),
    errors.NotFound: HttpError(404, "invalid_request_error", "not_found"),
    errors.Unauthenticated: HttpError(401, "authentication_error", "invalid_api_key"),
    errors.PermissionDenied: HttpError(403, "permission_error", None),
    errors.WeightsMismatch: HttpError(409, "invalid_request_error", "weights_mismatch"),
    errors.AlreadyDone: HttpError(409, "invalid_request_error", "already_done"),
    errors.Unplaceable: HttpError(400, "invalid_request_error", "unplaceable"),
    errors.InsufficientBalance: HttpError(402, "insufficient_quota", "insufficient_balance"),
    errors.RateLimited: HttpError(429, "rate_limit_error", "rate_limit_exceeded"),
    errors.NoCapacityNow: HttpError(503, "service_unavailable", "no_capacity"),
    errors.DatabaseUnavailable: HttpError(503, "service_unavailable", "database_unavailable"),
    errors.JobFailed: HttpError(502, "server_error", "job_failed"),
}


ANTHROPIC_PATHS = ("/v1/messages",)
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                   403: "permission_error", 404: "not_found_error", 409: "invalid_request_error",
                   413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def speaks_anthropic(request: Request) -> bool:
    return request.url.path in ANTHROPIC_PATHS


def anthropic_error_body(status: int, message: str) -> dict:
    return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(status, "api_error"),
                                       "message": message}}


def http_error_for(error: errors.CoordinatorError) -> HttpError:
    for kind in type(error).__mro__:
        if kind in HTTP_FOR_ERROR:
            return HTTP_FOR_ERROR[kind]  # type: ignore[index]
    raise AssertionError(f"no HTTP status mapped for {type(error).__name__}")


def error_body(message: str, kind: str, param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def body_for(error: errors.CoordinatorError) -> dict:
    mapped = http_error_for(error)
    return error_body(shown(str(error), ERROR_CHARS_MAX), mapped.type, getattr(error, "param", None),
                      mapped.code)


def error_response(error: errors.CoordinatorError, job_id: str | None = None,
                   anthropic: bool = False) -> JSONResponse:
    mapped = http_error_for(error)
    headers = {}
    retry_after_s = getattr(error, "retry_after_s", None)
    if retry_after_s is not None:
        headers["retry-after"] = str(retry_after_s)
    if job_id is not None:
        headers[JOB_ID_HEADER] = job_id
    body = anthropic_error_body(mapped.status, shown(str(error), ERROR_CHARS_MAX)) if anthropic else body_for(error)
    return JSONResponse(body, status_code=mapped.status, headers=headers)


class JobError(Exception):
    """A coordinator error about a job already created: the response names the job."""

    def __init__(self, error: errors.CoordinatorError, job_id: str) -> None:
        super().__init__(str(error))
        self.error, self.job_id = error, job_id


def _location(loc: tuple) -> str:
    """("body", "messages", 0, "role") -> "messages[0].role"; union-member tags are dropped."""
    if loc and loc[0] == "header":
        return ".".join(str(part) for part in loc[1:])
    text = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path") else loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif str(part).startswith("type="):
            continue  # a discriminated union's tag (schemas.format_tag): not a field
        elif str(part).isidentifier():
            text += f".{part}" if text else str(part)
        else:
            break  # pydantic names the union member it tried ("constrained-str"): not a field
    return text


async def on_coordinator_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, errors.CoordinatorError)
    log.info("request refused: %s", shown(str(error), ERROR_CHARS_MAX))
    return error_response(error, anthropic=speaks_anthropic(request))


async def on_job_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, JobError)
    log.info("job %s refused: %s", error.job_id, shown(str(error.error), ERROR_CHARS_MAX))
    return error_response(error.error, error.job_id, anthropic=speaks_anthropic(request))


async def on_validation_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    problems = error.errors()
    # A field we do not honour is the first thing to tell: fixing the rest would not help.
    problems = sorted(problems, key=lambda problem: problem.get("type") != "extra_forbidden")
    first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
    param = _location(tuple(first.get("loc", ()))) or None
    if param and (refused := refused_field(param)):  # a field we explain, as response_format
        param, message = refused, refusal_message(refused)
    elif first.get("type") == "extra_forbidden" and param:
        message = refusal_message(param)
    else:
        message = shown(f"{param}: {first['msg']}" if param else str(first["msg"]), ERROR_CHARS_MAX)
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more problems)"
    if speaks_anthropic(request):
        return JSONResponse(anthropic_error_body(400, message), status_code=400)
    return JSONResponse(error_body(message, "invalid_request_error", param), status_code=400)


async def on_http_exception(request: Request, error: Exception) -> JSONResponse:
    """Routing errors (unknown path, wrong method) in the same error format."""
    assert isinstance(error, StarletteHTTPException)
    message = (f"no such endpoint: {request.method} {request.url.path}"
               if error.status_code in (404, 405) else str(error.detail))
    body = (anthropic_error_body(error.status_code, message) if speaks_anthropic(request)
            else error_body(message, "invalid_request_error"))
    return JSONResponse(body, status_code=error.status_code, headers=error.headers)
