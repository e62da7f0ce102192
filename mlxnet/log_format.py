"""`--log-format json`: one JSON object per log line, with the job, node and request ids.

Ids are taken from the record when a call passes them (`extra={"job_id": ...}`), else from the
message, where the coordinator and the node name them in their own formats (job-<32 hex>,
node-<24 hex>); the request id is the one the HTTP gateway is serving (contracts.log_context).
Keys are always present, null when the event has no such id, so queries need no guards.
"""

from __future__ import annotations

import json
import logging
import re
import time

from contracts import log_context

_JOB_ID = re.compile(r"\bjob-[0-9a-f]{32}\b")
_NODE_ID = re.compile(r"\bnode-[0-9a-f]{24}\b")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _found(record: logging.LogRecord, name: str, pattern: re.Pattern[str], message: str) -> str | None:
    given = getattr(record, name, None)
    if given:
        return str(given)
    match = pattern.search(message)
    return match.group(0) if match else None


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        seconds = time.gmtime(record.created)
        event: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", seconds) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": message,
            "job_id": _found(record, "job_id", _JOB_ID, message),
            "node_id": _found(record, "node_id", _NODE_ID, message),
            "request_id": getattr(record, "request_id", None) or log_context.request_id.get(),
        }
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, ensure_ascii=False)


def formatter(name: str) -> logging.Formatter:
    assert name in FORMATS, name
    return JsonFormatter() if name == "json" else logging.Formatter(TEXT_FORMAT)
