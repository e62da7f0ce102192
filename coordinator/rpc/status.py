"""The one table from coordinator errors to gRPC status codes."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TypeVar

import grpc

from contracts.limits import ERROR_CHARS_MAX, shown
from contracts.signing import BIND_NONCE_METADATA_KEY
from coordinator import errors

log = logging.getLogger(__name__)

STATUS_FOR_ERROR: dict[type[errors.CoordinatorError], grpc.StatusCode] = {
    errors.InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    errors.WeightsMismatch: grpc.StatusCode.FAILED_PRECONDITION,
    errors.AlreadyDone: grpc.StatusCode.ALREADY_EXISTS,
    errors.Unplaceable: grpc.StatusCode.FAILED_PRECONDITION,
    errors.InsufficientBalance: grpc.StatusCode.FAILED_PRECONDITION,
    errors.RateLimited: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.NoCapacityNow: grpc.StatusCode.UNAVAILABLE,
    errors.DatabaseUnavailable: grpc.StatusCode.UNAVAILABLE,
    errors.JobFailed: grpc.StatusCode.ABORTED,
}

Handler = TypeVar("Handler", bound=Callable)


def status_for(error: errors.CoordinatorError) -> grpc.StatusCode:
    for kind in type(error).__mro__:
        if kind in STATUS_FOR_ERROR:
            return STATUS_FOR_ERROR[kind]  # type: ignore[index]
    raise AssertionError(f"no gRPC status mapped for {type(error).__name__}")


async def _abort(context: grpc.aio.ServicerContext, error: errors.CoordinatorError) -> None:
    retry_after_s = getattr(error, "retry_after_s", None)
    if retry_after_s is not None:  # as HTTP's Retry-After, for clients that back off
        context.set_trailing_metadata((("retry-after", str(retry_after_s)),))
    if isinstance(error, errors.SessionUnbound):  # the node signs it in BindSession, then retries
        context.set_trailing_metadata(((BIND_NONCE_METADATA_KEY, error.bind_nonce),))
    await context.abort(status_for(error), shown(str(error), ERROR_CHARS_MAX))


def translate_errors(handler: Handler) -> Handler:
    """Abort the RPC with the mapped status when a handler (a coroutine) raises a CoordinatorError."""

    @functools.wraps(handler)
    async def wrapper(self, request, context):  # type: ignore[no-untyped-def]
        try:
            return await handler(self, request, context)
        except errors.CoordinatorError as error:
            log.info("%s refused: %s", handler.__name__, shown(str(error), ERROR_CHARS_MAX))
            await _abort(context, error)

    return wrapper  # type: ignore[return-value]


def translate_stream_errors(handler: Handler) -> Handler:
    """The same, for server-streaming handlers (async generators)."""

    @functools.wraps(handler)
    async def wrapper(self, request, context):  # type: ignore[no-untyped-def]
        try:
            async for item in handler(self, request, context):
                yield item
        except errors.CoordinatorError as error:
            log.info("%s refused: %s", handler.__name__, shown(str(error), ERROR_CHARS_MAX))
            await _abort(context, error)

    return wrapper  # type: ignore[return-value]
