"""POST /v1/responses with the official openai client, unchanged, against a coordinator and a
node running real MLX inference (processes): input and instructions, streaming events, function
tools, previous_response_id for the caller's own responses, and refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import openai
import pytest

from tests.coordinator.gateway.conftest import MESSAGES, MODEL_ID, GatewayNetwork, gateway_network

pytestmark = pytest.mark.e2e
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Ur"]}},
                          "required": ["city"]}}
CALL_TOKENS = 96


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[GatewayNetwork]:
    with gateway_network(tmp_path_factory.mktemp("responses"), tiny_model_dir, "sqlite",
                         (("mini", "m4-pro-64", "alice"),)) as net:
        yield net


def test_input_and_instructions_answer_what_chat_answers(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("responses"))
    response = client.responses.create(model=MODEL_ID, instructions=MESSAGES[0]["content"],
                                       input=MESSAGES[1]["content"], max_output_tokens=16,
                                       temperature=0)
    chat = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_tokens=16,  # type: ignore[arg-type]
                                          temperature=0)
    assert response.output_text == chat.choices[0].message.content
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 16
    assert response.usage.input_tokens == chat.usage.prompt_tokens


def test_streaming_gives_the_responses_events_and_the_same_text(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("responses-stream"))
    whole = client.responses.create(model=MODEL_ID, input="In the beginning", max_output_tokens=12,
                                    temperature=0)
    events = list(client.responses.create(model=MODEL_ID, input="In the beginning",
                                          max_output_tokens=12, temperature=0, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.incomplete"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert deltas == whole.output_text
    assert events[-1].response.output_text == whole.output_text  # type: ignore[union-attr]


def test_a_function_call_and_its_output_continue_by_previous_response_id(network: GatewayNetwork) -> None:
    client = network.client(network.new_key("responses-tools"))
    called = client.responses.create(model=MODEL_ID, input="What is the weather in Paris?",
                                     tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},  # type: ignore[list-item]
                                     max_output_tokens=CALL_TOKENS, temperature=0)
    (call,) = [item for item in called.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments)["city"] in ("Paris", "Ur")
    assert called.status == "completed"
    streamed = list(client.responses.create(
        model=MODEL_ID, input="What is the weather in Paris?", tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=CALL_TOKENS,
        temperature=0, stream=True))
    arguments = [e for e in streamed if e.type == "response.function_call_arguments.done"]
    assert [a.arguments for a in arguments] == [call.arguments]  # type: ignore[union-attr]
    answer = client.responses.create(model=MODEL_ID, previous_response_id=called.id, tools=[WEATHER],  # type: ignore[list-item]
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": "Sunny, 21 C"}],
                                     max_output_tokens=8, temperature=0)
    assert answer.output_text and answer.previous_response_id == called.id
    assert answer.usage is not None and called.usage is not None
    assert answer.usage.input_tokens > called.usage.input_tokens  # the conversation came along
    with pytest.raises(openai.NotFoundError):  # another consumer's response is not found
        network.client(network.new_key("stranger")).responses.create(
            model=MODEL_ID, previous_response_id=called.id, input="and?", max_output_tokens=4)


def test_text_format_json_schema_answers_with_json_that_validates(network: GatewayNetwork) -> None:
    schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Ur"]}, "sunny": {"type": "boolean"}},
              "required": ["city", "sunny"], "additionalProperties": False}
    client = network.client(network.new_key("responses-json"))
    response = client.responses.create(model=MODEL_ID, input="Weather as JSON", max_output_tokens=CALL_TOKENS,
                                       temperature=0, text={"format": {"type": "json_schema", "name": "w",
                                                                       "schema": schema, "strict": True}})
    assert response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), schema)


@pytest.mark.parametrize(("fields", "param"), [
    ({"reasoning": {"effort": "low", "summary": "auto"}}, "reasoning.summary"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "string", "pattern": "x"}}}},
     "text.format.schema.pattern"),
    ({"text": {"format": {"type": "grammar"}}}, "text.format"),
    ({"include": ["reasoning.encrypted_content"]}, "include"),
])
def test_fields_it_cannot_honour_are_400s_naming_them(network: GatewayNetwork, fields: dict,
                                                      param: str) -> None:
    client = network.client(network.new_key("responses-bad"))
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL_ID, input="hi", max_output_tokens=4, **fields)
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == param
