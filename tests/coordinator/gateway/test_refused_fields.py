"""Refuse, don't ignore: a field the gateway cannot honour is a 400 naming it, seen through the
official openai client; hints (user, metadata, store) are accepted.

No node serves the model here, so a request that passes the gateway's checks ends in a 404
for the model: that 404, not a 400, is what shows a hint was accepted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from coordinator.gateway.server import start_gateway
from tests.coordinator.gateway.service_harness import make_service, new_consumer

MESSAGES = [{"role": "user", "content": "In the beginning"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    url = f"sqlite:///{tmp_path_factory.mktemp('refused') / Path('coordinator.db')}"
    service = make_service(url)
    key = new_consumer(service, "agent").key
    gateway = start_gateway(service)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{gateway.port}/v1", api_key=key,
                           max_retries=0, timeout=30)
    yield client
    client.close()
    gateway.stop()
    service.db.dispose()


def _refusal(client: openai.OpenAI, **fields: object) -> dict:
    """The 400's error object."""
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="test/none", messages=MESSAGES,  # type: ignore[arg-type]
                                       max_tokens=4, **fields)  # type: ignore[call-overload]
    assert raised.value.status_code == 400
    body = raised.value.body  # the client hands over the body's "error" object
    assert isinstance(body, dict)
    return body


@pytest.mark.parametrize(("fields", "param", "says"), [
    ({"logit_bias": {"5": 10}}, "logit_bias", "logit_bias is not supported"),
    ({"extra_body": {"chat_template_kwargs": {"add_vision_id": True}}},
     "chat_template_kwargs.add_vision_id", "does not support it"),
    ({"service_tier": "flex"}, "service_tier", "not offered"),
    ({"modalities": ["text", "audio"]}, "modalities", "text modality"),
    ({"frequency_penalty": 0.5}, "frequency_penalty", "less than or equal to 0"),
    ({"presence_penalty": -1.0}, "presence_penalty", "greater than or equal to 0"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "format": "email"}}}}, "response_format.json_schema.schema.format",
     "the schema feature 'format' is not one structured output decodes under"),
    ({"response_format": {"type": "grammar", "grammar": "start: x"}}, "response_format", "type"),
    ({"extra_body": {"top_k": 5}}, "top_k", "does not support it"),
    ({"extra_body": {"function_call": "auto"}}, "function_call", "send `tool_choice`"),
])
def test_a_field_the_gateway_cannot_honour_is_a_400_naming_it(
        client: openai.OpenAI, fields: dict, param: str, says: str) -> None:
    error = _refusal(client, **fields)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert says in error["message"]


def test_an_unknown_field_inside_a_message_is_named_with_its_path(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="test/none", max_tokens=4, messages=[  # type: ignore[list-item]
            {"role": "user", "content": "hi", "audio": {"id": "a"}}])
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == "messages[0].audio"


def test_the_first_problem_told_is_the_field_not_honoured(client: openai.OpenAI) -> None:
    """A request that also breaks a limit hears first of the field it must drop."""
    error = _refusal(client, temperature=9.0, logit_bias={"1": 1})
    assert error["param"] == "logit_bias"


@pytest.mark.parametrize("fields", [
    {"user": "agent-7"},
    {"metadata": {"run": "42", "team": "search"}},
    {"store": True},
    {"frequency_penalty": 0, "presence_penalty": 0.0},
    {"response_format": {"type": "text"}},
    {"response_format": {"type": "json_object"}},  # supported: decoded under a JSON grammar
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": False}}},
    {"reasoning_effort": "high"},  # supported where the model's template reads it (checked with the model)
    {"stream_options": {"include_usage": True, "include_obfuscation": False}, "stream": True},
])
def test_hints_and_no_op_values_are_accepted(client: openai.OpenAI, fields: dict) -> None:
    with pytest.raises(openai.NotFoundError) as raised:  # past every check: no node serves it
        result = client.chat.completions.create(model="test/none", messages=MESSAGES,  # type: ignore[arg-type]
                                                max_tokens=4, **fields)  # type: ignore[call-overload]
        list(result)  # type: ignore[call-overload]  # a stream raises on its first read
    body = raised.value.body
    assert isinstance(body, dict) and body["code"] == "model_not_found"


def test_the_completions_route_refuses_unknown_fields_too(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model="test/none", prompt="In the", max_tokens=4,
                                  frequency_penalty=0.2, extra_body={"min_p": 0.1})
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == "min_p"
