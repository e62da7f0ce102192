"""Hostile HTTP requests against the real gateway on loopback: each gets a 4xx naming what is
wrong, never a 500, and the connection limits hold (body size, slow request heads)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from contracts.limits import HTTP_BODY_BYTES_MAX
from coordinator.gateway.server import RunningGateway, start_gateway
from coordinator.service import CoordinatorService
from coordinator.world import operator_keys
from tests.coordinator.gateway.service_harness import make_service, new_consumer

HEADER_READ_S = 0.5  # short, so the slow-head test waits little; the server's default is longer


@dataclass
class Edge:
    service: CoordinatorService
    gateway: RunningGateway
    key: str
    operator_key: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.port}"


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    url = f"sqlite:///{tmp_path_factory.mktemp('edge') / Path('coordinator.db')}"
    service = make_service(url)
    key = new_consumer(service, "consumer").key
    with service.db.transaction() as session:
        _, operator_key = operator_keys.create_operator_key(session, "alice", "test",
                                                            service.clock.now_ms())
    gateway = start_gateway(service, header_read_s=HEADER_READ_S)
    yield Edge(service, gateway, key, operator_key)
    gateway.stop()
    service.db.dispose()


def _post_raw(edge: Edge, path: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{edge.base_url}{path}", content=body, timeout=30, headers={
        "content-type": "application/json", "authorization": f"Bearer {edge.key}"})


@pytest.mark.parametrize("content", [
    "x\ud800y",  # a lone surrogate: JSON can spell it, no UTF-8 encoder can store it
    [{"type": "text", "text": "\udfff"}],
])
def test_a_lone_surrogate_in_chat_content_is_a_400_naming_the_field(edge: Edge, content: object) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode()
    assert b"\\ud" in body  # sent escaped, as JSON allows
    response = _post_raw(edge, "/v1/chat/completions", body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"].startswith("messages[0].content")
    if isinstance(content, str):  # (for a list, pydantic reports the str member's miss first)
        assert "lone surrogate" in error["message"]


def test_a_lone_surrogate_in_a_prompt_model_or_stop_is_a_400(edge: Edge) -> None:
    for field, body in (("prompt", {"model": "m", "prompt": "a\ud800"}),
                        ("stop", {"model": "m", "prompt": "a", "stop": "\ud800"}),
                        ("model", {"model": "\ud800", "prompt": "a"})):
        response = _post_raw(edge, "/v1/completions", json.dumps(body).encode())
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == field


def _http_response_head(sock: socket.socket) -> bytes:
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(4096)
        if not chunk:
            break
        received += chunk
    return received


def test_a_body_over_the_limit_is_refused_with_413_before_it_is_read(edge: Edge) -> None:
    declared = 50 << 20
    with socket.create_connection(("127.0.0.1", edge.gateway.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % declared + b"x" * 65_536)
        head = _http_response_head(sock)
    assert head.startswith(b"HTTP/1.1 413 ")


def test_a_chunked_body_is_refused_with_413_once_it_passes_the_limit(edge: Edge) -> None:
    chunk = 1 << 20
    sent = 0
    with socket.create_connection(("127.0.0.1", edge.gateway.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        try:
            while sent <= HTTP_BODY_BYTES_MAX + chunk:
                sock.sendall(b"%x\r\n" % chunk + b"x" * chunk + b"\r\n")
                sent += chunk
        except OSError:
            pass  # the server answered and closed while we were still sending
        head = _http_response_head(sock)
    assert head.startswith(b"HTTP/1.1 413 ")


def test_a_body_under_the_limit_is_read(edge: Edge) -> None:
    response = _post_raw(edge, "/v1/completions", json.dumps(
        {"model": "no/such-model", "prompt": "hello " * 1000}).encode())
    assert response.status_code == 404  # read, parsed, and refused for the model, not the size


def test_a_connection_that_never_finishes_its_request_head_is_closed(edge: Edge) -> None:
    with socket.create_connection(("127.0.0.1", edge.gateway.port), timeout=30) as sock:
        sock.sendall(b"GET /world/api/totals HTTP/1.1\r\nHost: edge\r\n")  # no blank line, ever
        assert sock.recv(1024) == b""  # closed by the server (the timeout above is far longer)


def test_a_connection_that_finishes_its_head_is_served(edge: Edge) -> None:
    with socket.create_connection(("127.0.0.1", edge.gateway.port), timeout=30) as sock:
        sock.sendall(b"GET /world/api/totals HTTP/1.1\r\nHost: edge\r\n\r\n")
        assert _http_response_head(sock).startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("page", ["²", "٣", "１", "1e3", "-1", "0x1", "9" * 40])
@pytest.mark.parametrize("path", ["/world/api/fleet", "/world/api/operator/jobs"])
def test_a_page_number_not_in_ascii_digits_is_a_400(edge: Edge, path: str, page: str) -> None:
    response = httpx.get(f"{edge.base_url}{path}", params={"page": page}, timeout=30,
                         headers={"authorization": f"Bearer {edge.operator_key}"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "page"


@pytest.mark.parametrize("epoch", ["²", "٣", "1" * 40])
def test_an_epoch_not_in_ascii_digits_is_a_400(edge: Edge, epoch: str) -> None:
    response = httpx.get(f"{edge.base_url}/world/api/operator/proofs/{epoch}", timeout=30,
                         headers={"authorization": f"Bearer {edge.operator_key}"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "epoch"


def test_an_error_never_copies_a_long_input_back(edge: Edge) -> None:
    model = "m" * 12_000  # a request head holds at most 16 KiB
    response = httpx.get(f"{edge.base_url}/v1/models/{model}", timeout=30,
                         headers={"authorization": f"Bearer {edge.key}"})
    assert response.status_code == 404
    assert len(response.content) < 2_048 and "characters)" in response.json()["error"]["message"]


def test_a_request_head_over_its_limit_is_refused(edge: Edge) -> None:
    with socket.create_connection(("127.0.0.1", edge.gateway.port), timeout=30) as sock:
        sock.sendall(b"GET /world/api/totals HTTP/1.1\r\nHost: edge\r\nX-Big: " + b"b" * (64 << 10)
                     + b"\r\n\r\n")
        head = _http_response_head(sock)
    assert head.startswith(b"HTTP/1.1 4")
