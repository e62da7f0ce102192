"""Every gRPC request checked at the door, before any servicer sees it.

A server interceptor wraps each method's handler so that

- a request that does not decode (invalid UTF-8 in a string, garbage bytes) answers
  INVALID_ARGUMENT instead of grpc's INTERNAL "Exception deserializing request";
- every field of every message (streamed ones too) is checked against contracts/limits.py:
  finite floats in range, bounded text, bytes and lists, valid text without control
  characters. The first problem answers INVALID_ARGUMENT naming the field and the limit.

Nothing of a refused request is stored, and its input is never echoed back or logged.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from contracts.limits import (
    DEFAULT_BYTES_MAX,
    DEFAULT_ITEMS_MAX,
    DEFAULT_TEXT_CHARS_MAX,
    FIELD_LIMITS,
    Limit,
    LimitExceeded,
    check_count,
    check_number,
    check_text,
)

log = logging.getLogger(__name__)
PACKAGE_PREFIX = "mlxnet.v1."
_NO_LIMIT = Limit()
_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)
_INTEGERS = (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
             FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
             FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64,
             FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_SFIXED64)


def limit_for(field: FieldDescriptor) -> Limit:
    name = field.containing_type.full_name.removeprefix(PACKAGE_PREFIX)
    return FIELD_LIMITS.get(f"{name}.{field.name}", _NO_LIMIT)


@dataclass(frozen=True)
class _FieldPlan:
    """What check_message needs of a field, read from its descriptor once (every streamed
    heartbeat passes here: descriptor lookups were most of the guard's cost)."""

    name: str
    kind: int
    repeated: bool
    nested: bool  # a message to walk (not a map entry)
    limit: Limit


_plans: dict[FieldDescriptor, _FieldPlan] = {}  # a few hundred fields, for the process's life


def _plan(field: FieldDescriptor) -> _FieldPlan:
    plan = _plans.get(field)
    if plan is None:
        nested = (field.type == FieldDescriptor.TYPE_MESSAGE
                  and not field.message_type.GetOptions().map_entry)
        plan = _FieldPlan(field.name, field.type, field.is_repeated, nested, limit_for(field))
        _plans[field] = plan
    return plan


def check_message(message: Message, path: str = "") -> None:
    """Raise LimitExceeded for the first field outside its limit (fields set, depth first)."""
    for field, value in message.ListFields():
        plan = _plan(field)
        name = f"{path}{plan.name}"
        if plan.repeated:
            limit = plan.limit
            items_max = limit.items_max if limit.items_max is not None else DEFAULT_ITEMS_MAX
            check_count(name, len(value), items_max)
            for index, item in enumerate(value):
                _check_value(f"{name}[{index}]", plan, item)
        else:
            _check_value(name, plan, value)


def _check_value(name: str, plan: _FieldPlan, value: object) -> None:
    kind, limit = plan.kind, plan.limit
    if kind == FieldDescriptor.TYPE_MESSAGE:
        if plan.nested:
            check_message(value, f"{name}.")  # type: ignore[arg-type]
    elif kind == FieldDescriptor.TYPE_STRING:
        check_text(name, value, limit, limit.chars_max or DEFAULT_TEXT_CHARS_MAX)  # type: ignore[arg-type]
    elif kind == FieldDescriptor.TYPE_BYTES:
        bytes_max = limit.chars_max or DEFAULT_BYTES_MAX
        if len(value) > bytes_max:  # type: ignore[arg-type]
            raise LimitExceeded(name, f"{name} is {len(value)} bytes; the limit is {bytes_max}")  # type: ignore[arg-type]
    elif kind in _FLOATS or kind in _INTEGERS:
        check_number(name, value, limit)  # type: ignore[arg-type]


class Undecodable:
    """Stands for a request that did not decode, so the handler can refuse it properly."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _tolerant(deserializer: Callable[[bytes], Message] | None) -> Callable[[bytes], object] | None:
    if deserializer is None:
        return None

    def decode(data: bytes) -> object:
        try:
            return deserializer(data)
        except (DecodeError, UnicodeDecodeError, ValueError) as error:
            return Undecodable(type(error).__name__)

    return decode


def refusal(request: object) -> str | None:
    """Why a decoded request must be refused, or None when it is fine."""
    if isinstance(request, Undecodable):
        return ("the request is not a valid protobuf message of this method's type (strings must "
                "be valid UTF-8)")
    if isinstance(request, Message):
        try:
            check_message(request)
        except LimitExceeded as error:
            return str(error)
    return None


async def _refuse(context: grpc.aio.ServicerContext, method: str, reason: str) -> None:
    log.info("%s refused at the edge: %s", method, reason)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, reason)


async def _checked_stream(requests: AsyncIterator[object], context: grpc.aio.ServicerContext,
                          method: str) -> AsyncIterator[object]:
    async for request in requests:
        reason = refusal(request)
        if reason is not None:
            await _refuse(context, method, reason)
        yield request


def _guard_unary_request(behavior: Callable, method: str, streaming_response: bool) -> Callable:
    if streaming_response:
        async def stream_behavior(request, context):  # type: ignore[no-untyped-def]
            reason = refusal(request)
            if reason is not None:
                await _refuse(context, method, reason)
            async for item in behavior(request, context):
                yield item
        return stream_behavior

    async def unary_behavior(request, context):  # type: ignore[no-untyped-def]
        reason = refusal(request)
        if reason is not None:
            await _refuse(context, method, reason)
        return await behavior(request, context)
    return unary_behavior


def _guard_stream_request(behavior: Callable, method: str, streaming_response: bool) -> Callable:
    if streaming_response:
        async def stream_stream(requests, context):  # type: ignore[no-untyped-def]
            async for item in behavior(_checked_stream(requests, context, method), context):
                yield item
        return stream_stream

    async def stream_unary(requests, context):  # type: ignore[no-untyped-def]
        return await behavior(_checked_stream(requests, context, method), context)
    return stream_unary


class EdgeGuard(grpc.aio.ServerInterceptor):
    """The interceptor: install it on the server (grpc.aio.server(interceptors=[EdgeGuard()]))."""

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        replaced: dict[str, object] = {
            "request_deserializer": _tolerant(handler.request_deserializer)}
        if handler.unary_unary is not None:
            replaced["unary_unary"] = _guard_unary_request(handler.unary_unary, method, False)
        elif handler.unary_stream is not None:
            replaced["unary_stream"] = _guard_unary_request(handler.unary_stream, method, True)
        elif handler.stream_unary is not None:
            replaced["stream_unary"] = _guard_stream_request(handler.stream_unary, method, False)
        elif handler.stream_stream is not None:
            replaced["stream_stream"] = _guard_stream_request(handler.stream_stream, method, True)
        return handler._replace(**replaced)
