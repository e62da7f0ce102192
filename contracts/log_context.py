"""The id of the request being served, for log lines (mlxnet.log_format's JSON lines).

A context variable: set by the edge that receives a request (the HTTP gateway), read by the
log formatter on whatever thread the request's work runs, since asyncio tasks and anyio's
worker threads run in a copy of the caller's context. It imports nothing of ours.
"""

from __future__ import annotations

from contextvars import ContextVar

request_id: ContextVar[str | None] = ContextVar("mlxnet_request_id", default=None)
