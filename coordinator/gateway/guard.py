"""The gateway's door: limits on a request's head and body size, and deadlines on both.

- A request line and headers over HTTP_HEADER_BYTES_MAX answer 431.
- A body over HTTP_BODY_BYTES_MAX answers 413 (at once when Content-Length says so,
  else as soon as the streamed body passes the limit); nothing of it is kept.
- A body that trickles in slower than HTTP_BODY_READ_S answers 408.
- A connection that has not sent a whole request head within HTTP_HEADER_READ_S of
  opening (or of its previous response) is closed, so slow headers cannot hold it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from contracts.limits import HTTP_BODY_BYTES_MAX, HTTP_BODY_READ_S, HTTP_HEADER_BYTES_MAX, HTTP_HEADER_READ_S

log = logging.getLogger(__name__)


class BodyLimit:
    """ASGI middleware: refuse bodies over bytes_max, and bodies sent too slowly."""

    def __init__(self, app: ASGIApp, bytes_max: int = HTTP_BODY_BYTES_MAX,
                 read_s: float = HTTP_BODY_READ_S) -> None:
        self.app, self.bytes_max, self.read_s = app, bytes_max, read_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _head_bytes(scope) > HTTP_HEADER_BYTES_MAX:  # h11 bounds only a head still arriving
            await _send_error(send, 431, f"the request line and headers are over the limit of "
                                         f"{HTTP_HEADER_BYTES_MAX} bytes", "request_head_too_large")
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.bytes_max:
            await _send_error(send, 413, f"the request body is over the limit of {self.bytes_max} "
                                         "bytes", "request_too_large")
            return
        await self.app(scope, self._limited(receive), send)

    def _limited(self, receive: Receive) -> Receive:
        received = 0
        body_done = False
        deadline = time.monotonic() + self.read_s

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # the body is in; later receives wait for a disconnect, unbounded
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise HTTPException(408, f"the request body took over {self.read_s:.0f} s to "
                                         "arrive") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.bytes_max:
                    raise HTTPException(413, f"the request body is over the limit of "
                                             f"{self.bytes_max} bytes")
                body_done = not message.get("more_body", False)
            else:
                body_done = True
            return message

        return limited_receive


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isascii() and text.isdigit() else None
    return None


def _head_bytes(scope: Scope) -> int:
    return (len(scope.get("raw_path", b"")) + len(scope.get("query_string", b""))
            + sum(len(name) + len(value) for name, value in scope.get("headers", ())))


async def _send_error(send: Send, status: int, message: str, code: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": code}}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing connections whose request head is too slow to arrive."""

    header_read_s = HTTP_HEADER_READ_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._cycle_seen = None
        self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(self.header_read_s, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        if getattr(self, "_header_timer", None) is not None:
            self._header_timer.cancel()  # type: ignore[union-attr]
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            log.info("closed a connection that sent no whole request head in %.0f s",
                     self.header_read_s)
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None and self.cycle is not self._cycle_seen:  # a new request's head is in
            self._cycle_seen = self.cycle
            self._cancel_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():  # the next request's head has the same deadline
            self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)


def header_deadline_protocol(header_read_s: float = HTTP_HEADER_READ_S) -> type[HeaderDeadlineProtocol]:
    """The protocol class for uvicorn's `http` setting, with this deadline on request heads."""
    return type("HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_read_s": header_read_s})
