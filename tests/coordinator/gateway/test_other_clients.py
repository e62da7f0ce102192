"""Other tools consumers already point at OpenAI, unchanged, against a coordinator and a real MLX
node (processes): LangChain's ChatOpenAI, and curl as the README shows it. Each must give the
same text as the official client gives for the same request."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI

from tests.coordinator.gateway.conftest import MESSAGES, MODEL_ID, GatewayNetwork, gateway_network

pytestmark = pytest.mark.e2e
AS_LANGCHAIN = [(m["role"], m["content"]) for m in MESSAGES]  # LangChain takes (role, text) pairs
MAX_TOKENS = 16
CLIENT_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[GatewayNetwork]:
    """One Mac on SQLite: what is checked here is the clients' side of the API, not the database."""
    with gateway_network(tmp_path_factory.mktemp("clients"), tiny_model_dir, "sqlite",
                         (("mini", "m4-pro-64", "alice"),)) as net:
        yield net


@pytest.fixture(scope="module")
def official(network: GatewayNetwork) -> tuple[str, int]:
    """The official client's text and completion tokens for the chat every test here sends."""
    answer = network.client(network.new_key("official")).chat.completions.create(
        model=MODEL_ID, messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0)  # type: ignore[arg-type]
    return answer.choices[0].message.content or "", answer.usage.completion_tokens


def _langchain(network: GatewayNetwork, key: str) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL_ID, base_url=network.base_url, api_key=key, temperature=0,
                      max_tokens=MAX_TOKENS, max_retries=0, timeout=CLIENT_TIMEOUT_S, stream_usage=True,
                      http_client=network.http_client())


def test_langchain_chat_model_invokes_like_the_official_client(
        network: GatewayNetwork, official: tuple[str, int]) -> None:
    key = network.new_key("langchain")
    text, completion_tokens = official
    answer = _langchain(network, key).invoke(AS_LANGCHAIN)
    assert text and answer.content == text
    assert answer.usage_metadata is not None
    assert answer.usage_metadata["output_tokens"] == completion_tokens
    assert answer.response_metadata["finish_reason"] in ("stop", "length")


def test_langchain_chat_model_streams_the_same_text_with_usage(
        network: GatewayNetwork, official: tuple[str, int]) -> None:
    key = network.new_key("langchain-stream")
    text, completion_tokens = official
    chunks = list(_langchain(network, key).stream(AS_LANGCHAIN))
    assert len(chunks) > 2  # streamed, not one answer
    assert "".join(str(chunk.content) for chunk in chunks) == text
    usage = [chunk.usage_metadata for chunk in chunks if chunk.usage_metadata]
    assert len(usage) == 1 and usage[0]["output_tokens"] == completion_tokens


def _curl(network: GatewayNetwork, key: str, path: str, body: dict | None = None,
          *extra: str) -> tuple[int, dict[str, str], str]:
    """curl as a consumer runs it; (HTTP status, headers, body)."""
    command = ["curl", "-sS", "--cacert", network.certificate, "-D", "-", f"{network.base_url}{path}",
               "-H", f"Authorization: Bearer {key}", *extra]
    if body is not None:
        command += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    finished = subprocess.run(command, capture_output=True, timeout=CLIENT_TIMEOUT_S, check=True)
    head, _, answer = finished.stdout.decode().partition("\r\n\r\n")  # bytes: text mode drops the \r
    status_line, *header_lines = head.split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, answer


def test_curl_gets_a_chat_completion_with_usage_and_the_job_id(
        network: GatewayNetwork, official: tuple[str, int]) -> None:
    key = network.new_key("curl")
    text, completion_tokens = official
    status, headers, answer = _curl(network, key, "/chat/completions", {
        "model": MODEL_ID, "messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 0})
    assert status == 200, answer
    body = json.loads(answer)
    assert body["choices"][0]["message"]["content"] == text
    assert body["usage"]["completion_tokens"] == completion_tokens
    status, _, job = _curl(network, key, f"/jobs/{headers['x-mlxnet-job-id']}")
    assert status == 200 and json.loads(job)["status"] == "completed"


def test_curl_streams_server_sent_events_that_end_with_done(
        network: GatewayNetwork, official: tuple[str, int]) -> None:
    key = network.new_key("curl-stream")
    text, completion_tokens = official
    status, headers, answer = _curl(network, key, "/chat/completions", {
        "model": MODEL_ID, "messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True}}, "-N")
    assert status == 200, answer
    assert headers["content-type"].startswith("text/event-stream") and headers["x-mlxnet-job-id"]
    lines = [line for line in answer.splitlines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    streamed = "".join(event["choices"][0]["delta"].get("content") or "" for event in events if event["choices"])
    assert streamed == text
    assert events[-1]["usage"]["completion_tokens"] == completion_tokens


def test_curl_with_a_bad_key_gets_a_401_that_says_what_to_fix(network: GatewayNetwork) -> None:
    status, _, answer = _curl(network, "mlxk_not-a-key", "/chat/completions",
                              {"model": MODEL_ID, "messages": MESSAGES, "max_tokens": MAX_TOKENS})
    assert status == 401
    error = json.loads(answer)["error"]
    assert error["code"] == "invalid_api_key" and "key" in error["message"]
