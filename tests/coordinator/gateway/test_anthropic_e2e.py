"""POST /v1/messages with the official anthropic client, unchanged, against a coordinator and a
node running real MLX inference (processes): text, streaming, stop sequences, tools and their
results, usage, and errors in Anthropic's format."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from tests.coordinator.gateway.conftest import MESSAGES, MODEL_ID, GatewayNetwork, gateway_network

pytestmark = pytest.mark.e2e
SYSTEM = MESSAGES[0]["content"]
USER = [{"role": "user", "content": MESSAGES[1]["content"]}]
WEATHER = {"name": "get_weather", "description": "The weather in a city", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Ur"]}},
    "required": ["city"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL_TOKENS = 96
# This client no longer takes temperature (Anthropic dropped it); older ones did, and the route does.
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[GatewayNetwork]:
    with gateway_network(tmp_path_factory.mktemp("anthropic"), tiny_model_dir, "sqlite",
                         (("mini", "m4-pro-64", "alice"),)) as net:
        yield net


def _client(network: GatewayNetwork, key: str | None = None, **options: object) -> anthropic.Anthropic:
    base_url = network.base_url.removesuffix("/v1")  # the client adds /v1/messages itself
    if "auth_token" not in options:
        key = key or network.new_key("claude-user")
    client = anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0, timeout=120,
                                 http_client=anthropic.DefaultHttpxClient(verify=network.ssl_context()),
                                 **options)  # type: ignore[arg-type]
    network.clients.append(client)  # type: ignore[arg-type]  # closed with the network
    return client


def test_a_message_answers_what_the_openai_route_answers(network: GatewayNetwork) -> None:
    key = network.new_key("both")
    message = _client(network, key).messages.create(model=MODEL_ID, system=SYSTEM, messages=USER,  # type: ignore[arg-type]
                                                   max_tokens=16, extra_body=GREEDY)
    chat = network.client(key).chat.completions.create(model=MODEL_ID, messages=MESSAGES,  # type: ignore[arg-type]
                                                      max_tokens=16, temperature=0)
    assert message.type == "message" and message.role == "assistant"
    (block,) = message.content
    assert block.type == "text" and block.text == chat.choices[0].message.content
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.usage.input_tokens == chat.usage.prompt_tokens > 0
    assert message.usage.output_tokens == chat.usage.completion_tokens == 16
    assert message.id.startswith("msg_")


def test_streaming_gives_anthropics_events_and_the_same_message(network: GatewayNetwork) -> None:
    client = _client(network)
    whole = client.messages.create(model=MODEL_ID, system=SYSTEM, messages=USER, max_tokens=12,  # type: ignore[arg-type]
                                   extra_body=GREEDY)
    with client.messages.stream(model=MODEL_ID, system=SYSTEM, messages=USER, max_tokens=12,  # type: ignore[arg-type]
                                extra_body=GREEDY) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop", "message_delta"} <= set(kinds)
    assert final.content[0].text == whole.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 12 and final.usage.input_tokens == whole.usage.input_tokens


def test_a_stop_sequence_cuts_the_text_and_is_named(network: GatewayNetwork) -> None:
    client = _client(network)
    text = client.messages.create(model=MODEL_ID, messages=USER, max_tokens=16,  # type: ignore[arg-type]
                                  extra_body=GREEDY).content[0].text  # type: ignore[union-attr]
    stop = text.split()[2]
    for streamed in (False, True):
        if streamed:
            with client.messages.stream(model=MODEL_ID, messages=USER, max_tokens=16, extra_body=GREEDY,  # type: ignore[arg-type]
                                        stop_sequences=[stop]) as stream:
                message = stream.get_final_message()
        else:
            message = client.messages.create(model=MODEL_ID, messages=USER, max_tokens=16,  # type: ignore[arg-type]
                                             extra_body=GREEDY, stop_sequences=[stop])
        assert message.content[0].text == text[:text.index(stop)]  # type: ignore[union-attr]
        assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop


def test_a_tool_choice_gets_a_tool_use_block_and_a_result_goes_back(network: GatewayNetwork) -> None:
    client = _client(network)
    asked = dict(model=MODEL_ID, messages=ASK, tools=[WEATHER], max_tokens=CALL_TOKENS, extra_body=GREEDY,
                 tool_choice={"type": "tool", "name": "get_weather"})
    message = client.messages.create(**asked)  # type: ignore[call-overload]
    assert message.stop_reason == "tool_use"
    (use,) = [block for block in message.content if block.type == "tool_use"]
    assert use.name == "get_weather" and use.input["city"] in ("Paris", "Ur")
    with client.messages.stream(**asked) as stream:  # type: ignore[call-overload]
        streamed = stream.get_final_message()
    (streamed_use,) = [block for block in streamed.content if block.type == "tool_use"]
    assert streamed_use.input == use.input and streamed.stop_reason == "tool_use"
    history = [*ASK, {"role": "assistant", "content": message.content},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                             "content": "Sunny, 21 C"}]}]
    answer = client.messages.create(model=MODEL_ID, messages=history, tools=[WEATHER],  # type: ignore[arg-type]
                                    max_tokens=8, extra_body=GREEDY)
    assert answer.content[0].type == "text" and answer.content[0].text
    assert answer.usage.input_tokens > message.usage.input_tokens


def test_the_key_goes_as_x_api_key_or_bearer_and_errors_are_anthropics(network: GatewayNetwork) -> None:
    key = network.new_key("bearer")
    bearer = _client(network, None, auth_token=key)  # Authorization: Bearer, no x-api-key
    assert bearer.messages.create(model=MODEL_ID, messages=USER, max_tokens=2).usage.output_tokens == 2  # type: ignore[arg-type]
    with pytest.raises(anthropic.AuthenticationError) as bad_key:
        _client(network, "mlxk_wrong").messages.create(model=MODEL_ID, messages=USER, max_tokens=2)  # type: ignore[arg-type]
    assert bad_key.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as refused:
        _client(network).messages.create(model=MODEL_ID, messages=USER, max_tokens=2,  # type: ignore[arg-type]
                                          extra_body={"top_k": 5})
    body = refused.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert body["error"]["message"].startswith("top_k is not supported")  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as thinking:
        _client(network).messages.create(model=MODEL_ID, messages=USER, max_tokens=2,  # type: ignore[arg-type]
                                          thinking={"type": "enabled", "budget_tokens": 1024})
    assert "thinking" in thinking.value.body["error"]["message"]  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError) as unknown:
        _client(network).messages.create(model="no/such-model", messages=USER, max_tokens=2)  # type: ignore[arg-type]
    assert unknown.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
