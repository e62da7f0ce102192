"""Every HTTP request gets an id: the client's `X-Request-Id` when it is a sane one, else a new
one. It is echoed in the response's `X-Request-Id` and set for the request's log lines
(contracts.log_context). Plain ASGI, not BaseHTTPMiddleware, so streams and disconnects pass
through untouched."""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contracts import log_context

HEADER = b"x-request-id"
_SANE = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    incoming = next((value for name, value in headers if name == HEADER), None)
    if incoming is not None and _SANE.match(incoming):
        return incoming.decode()
    return "req-" + uuid.uuid4().hex


class RequestIds:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope["headers"])
        token = log_context.request_id.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  (HEADER, request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            log_context.request_id.reset(token)
