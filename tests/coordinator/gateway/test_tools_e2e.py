"""Tool calling through the gateway, end to end: the official openai client and LangChain's agent
loop against a coordinator and a node running real MLX inference (processes).

The node serves the tiny model twice: with its Qwen-style template, which renders tools, and
with a plain one, which does not. The coordinator's verifier replays every job of a new node,
so a constrained call is checked as any other job is.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import wrap_model_call
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from coordinator.storage.database import Database
from coordinator.verification.store import CheckStatus
from mlxnet.checks_view import wait_for_checks
from mlxnet.processes import start_coordinator, start_nodes
from node_agent.tiny_model.builder import PLAIN_CHAT_TEMPLATE
from tests.coordinator.gateway.conftest import MODEL_ID, GatewayNetwork

pytestmark = pytest.mark.e2e
PLAIN_MODEL_ID = "test/tiny-plain"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Ur"]}},
                   "required": ["city"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
MAX_TOKENS = 96


def _plain_copy(model_dir: Path, into: Path) -> Path:
    shutil.copytree(model_dir, into)
    config_path = into / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "chat_template": PLAIN_CHAT_TEMPLATE}))
    return into


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[GatewayNetwork]:
    tmp_path = tmp_path_factory.mktemp("tools")
    plain = _plain_copy(tiny_model_dir, tmp_path / "plain-model")
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    coordinator = start_coordinator(tmp_path, database_url=url, heartbeat_interval_ms=500,
                                    verify_models=(f"{MODEL_ID}={tiny_model_dir}",))
    net = GatewayNetwork(tmp_path, url, tiny_model_dir, coordinator, [], Database(url))
    with contextlib.closing(_Stopper(net)):
        net.nodes = start_nodes(tmp_path, net.grpc_address, [
            ("mini", [f"{MODEL_ID}={tiny_model_dir}", f"{PLAIN_MODEL_ID}={plain}"], "m4-pro-64", "alice")],
            net.trust)
        yield net


class _Stopper:
    def __init__(self, net: GatewayNetwork) -> None:
        self._net = net

    def close(self) -> None:
        self._net.stop()


def test_a_named_tool_choice_answers_with_a_call_that_the_verifier_passes(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("agent"))
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL_ID, messages=ASK, tools=[WEATHER], tool_choice=NAMED,  # type: ignore[list-item, arg-type]
        max_tokens=MAX_TOKENS, temperature=0)
    answer = raw.parse()
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] in ("Paris", "Ur")
    job_id = raw.headers["x-mlxnet-job-id"]
    assert call.id.startswith("call_")
    (check,) = wait_for_checks(network.database_url, [job_id])
    assert check.status is CheckStatus.PASSED  # the replay applied the same grammar


def test_a_streamed_call_comes_as_openai_streams_it(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("agent-stream"))
    whole = client.chat.completions.create(model=MODEL_ID, messages=ASK, tools=[WEATHER],  # type: ignore[list-item, arg-type]
                                           tool_choice=NAMED, max_tokens=MAX_TOKENS, temperature=0)
    chunks = list(client.chat.completions.create(
        model=MODEL_ID, messages=ASK, tools=[WEATHER], tool_choice=NAMED,  # type: ignore[list-item, arg-type]
        max_tokens=MAX_TOKENS, temperature=0, stream=True))
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].function.name == "get_weather"
    assert deltas[0].function.arguments == ""
    arguments = "".join(d.function.arguments or "" for d in deltas)
    (call,) = whole.choices[0].message.tool_calls or []
    assert arguments == call.function.arguments and deltas[0].id == call.id.replace(
        call.id.split("_")[1], deltas[0].id.split("_")[1])  # the same call, in its own job
    assert all(not c.choices[0].delta.content for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_call_and_its_result_go_back_through_the_template(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("agent-loop"))
    first = client.chat.completions.create(model=MODEL_ID, messages=ASK, tools=[WEATHER],  # type: ignore[list-item, arg-type]
                                           tool_choice=NAMED, max_tokens=MAX_TOKENS, temperature=0)
    message = first.choices[0].message
    (call,) = message.tool_calls or []
    history = [*ASK, message, {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}]
    second = client.chat.completions.create(model=MODEL_ID, messages=history, tools=[WEATHER],  # type: ignore[arg-type, list-item]
                                            max_tokens=12, temperature=0)
    assert second.choices[0].message.content  # the tiny model answers in words
    assert second.usage.prompt_tokens > first.usage.prompt_tokens  # the call and result were rendered


def test_tool_choice_none_leaves_the_answer_as_text(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("agent-none"))
    answer = client.chat.completions.create(model=MODEL_ID, messages=ASK, tools=[WEATHER],  # type: ignore[list-item, arg-type]
                                            tool_choice="none", max_tokens=8, temperature=0,
                                            user="agent-7", metadata={"run": "1"}, store=False)
    assert answer.choices[0].message.tool_calls is None
    assert answer.choices[0].message.content and answer.choices[0].finish_reason == "length"


@pytest.mark.parametrize(("fields", "param"), [
    ({"tools": [WEATHER]}, "tools"),
    ({"messages": [*ASK, {"role": "assistant", "content": None, "tool_calls": [{
        "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"}]}, "messages"),
])
def test_a_model_whose_template_has_no_tools_refuses_them_with_a_400(
        network: GatewayNetwork, fields: dict, param: str) -> None:
    client = network.client(network.new_key("agent-plain"))
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(**{"model": PLAIN_MODEL_ID, "messages": ASK,
                                          "max_tokens": 8, **fields})
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == param
    assert "chat template does not render" in body["message"]


@pytest.mark.parametrize(("fields", "param"), [
    ({"tool_choice": NAMED}, "tool_choice"),  # no tools offered
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
     "tool_choice"),
    ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tools": [{**WEATHER, "function": {**WEATHER["function"], "strict": True}}]},
     "tools[0].function.strict"),
])
def test_tool_requests_that_cannot_be_honoured_are_400s(network: GatewayNetwork, fields: dict,
                                                        param: str) -> None:
    client = network.client(network.new_key("agent-bad"))
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=8, **fields)  # type: ignore[arg-type]
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == param


@tool
def get_weather(city: Literal["Paris", "Ur"]) -> str:  # bounded: the tiny model never ends a free string
    """The weather in a city."""
    return f"Sunny in {city}, 21 C"


def test_a_langchain_agent_calls_the_tool_and_answers(network: GatewayNetwork) -> None:
    """LangChain's own agent loop: the model calls the tool, the agent runs it and sends the
    result back, and the model answers. Its first turn names the tool: the tiny model would
    never choose one by itself."""
    model = ChatOpenAI(model=MODEL_ID, base_url=network.base_url, api_key=network.new_key("lc"),
                       temperature=0, max_tokens=MAX_TOKENS, max_retries=0, timeout=120,
                       http_client=network.http_client())

    @wrap_model_call
    def call_the_tool_first(request, handler):  # type: ignore[no-untyped-def]
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            request = request.override(tool_choice="get_weather")
        return handler(request)

    agent = create_agent(model, tools=[get_weather], middleware=[call_the_tool_first])
    state = agent.invoke({"messages": [("user", "What is the weather in Paris?")]})
    messages = state["messages"]
    calls = [c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert [c["name"] for c in calls] == ["get_weather"]
    assert calls[0]["args"]["city"] in ("Paris", "Ur")
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [r.content for r in results] == [f"Sunny in {calls[0]['args']['city']}, 21 C"]
    assert isinstance(messages[-1], AIMessage) and messages[-1].content and not messages[-1].tool_calls
