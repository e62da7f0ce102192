"""A fake Hugging Face hub on 127.0.0.1: the model-info API and file downloads with Range.

It serves model directories under repo ids, in the hub's layout: weights as LFS
files (sha256), the rest as git blobs (sha1 of "blob <size>\\0" + content).
Knobs make it misbehave the way networks do: cut a file off after some bytes
(once), or serve corrupted bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<name>.+)")
_INFO = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<revision>[^/?]+))?(?:\?.*)?")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


@dataclass
class FakeHub:
    repos: dict[str, Path] = field(default_factory=dict)
    cut_after_bytes: dict[str, int] = field(default_factory=dict)  # file name -> bytes, once
    corrupt: set[str] = field(default_factory=set)  # file names served with a flipped byte
    range_requests: list[tuple[str, int]] = field(default_factory=list)  # (file, first byte)
    downloads: int = 0

    def siblings(self, repo: str) -> list[dict]:  # type: ignore[type-arg]
        found = []
        for path in sorted(self.repos[repo].iterdir()):
            data = path.read_bytes()
            entry: dict[str, object] = {"rfilename": path.name, "size": len(data),
                                        "blobId": git_blob_id(data)}
            if path.suffix == ".safetensors":
                entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                                "pointerSize": 134}
            found.append(entry)
        return found


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:  # keep test output quiet
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            info = _INFO.fullmatch(self.path)
            if info is not None and info["repo"] in hub.repos:
                body = json.dumps({"id": info["repo"], "sha": COMMIT,
                                   "siblings": hub.siblings(info["repo"])}).encode()
                self._send(200, body, {"Content-Type": "application/json"})
                return
            resolve = _RESOLVE.fullmatch(self.path)
            if resolve is None or resolve["repo"] not in hub.repos:
                self._send(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})
                return
            self._file(hub.repos[resolve["repo"]] / resolve["name"], resolve["name"])

        def _file(self, path: Path, name: str) -> None:
            data = path.read_bytes()
            if name in hub.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            first = 0
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
            if match is not None:
                first = int(match.group(1))
                hub.range_requests.append((name, first))
            hub.downloads += 1
            body = data[first:]
            headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{git_blob_id(data)}"'}
            status = 206 if first else 200
            if first:
                headers["Content-Range"] = f"bytes {first}-{len(data) - 1}/{len(data)}"
            cut = hub.cut_after_bytes.pop(name, None)
            if cut is not None:  # promise the whole body, send part of it, hang up
                self.send_response(status)
                for header, value in headers.items():
                    self.send_header(header, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            self._send(status, body, headers)

    return Handler


class RunningHub:
    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
