"""The gRPC edge's chat fields: tools, tool choice, response format and template options, checked
as the HTTP gateway checks them, and a completed chat job's output read back as an answer."""

from __future__ import annotations

import json

import pytest

from contracts.chat import (
    NO_OPTIONS,
    NO_TOOLS,
    ChatMessage,
    ChatOptions,
    ChatTools,
    canonical_json,
    encode_chat_prompt,
)
from contracts.models import CHAT_FEATURE_THINKING, CHAT_FEATURE_THINKS_WHEN_ENABLED
from coordinator.errors import InvalidRequest
from coordinator.jobs.answers import chat_answer
from coordinator.jobs.chat_options import FunctionTool, chat_options, chat_tools

WEATHER = FunctionTool("get_weather", "The weather", '{"type":"object","properties":{"city":{"type":"string"}}}')
ASK = (ChatMessage("user", "hi"),)


def test_tools_become_the_same_definitions_the_gateway_makes() -> None:
    tools = chat_tools((WEATHER,), "", "get_weather", None)
    assert tools.choice == "function:get_weather" and tools.parallel
    assert json.loads(tools.definitions[0]) == {"type": "function", "function": {
        "name": "get_weather", "description": "The weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    assert chat_tools((), "", "", None) is NO_TOOLS
    assert chat_tools((WEATHER,), "none", "", False) == ChatTools(tools.definitions, "none", False)


@pytest.mark.parametrize(("tools", "choice", "function", "param"), [
    ((), "required", "", "tool_choice"),
    ((), "", "get_weather", "tool_choice"),
    ((WEATHER,), "sometimes", "", "tool_choice"),
    ((WEATHER,), "none", "get_weather", "tool_choice_function"),
    ((WEATHER,), "", "get_time", "tool_choice_function"),
    ((WEATHER, WEATHER), "", "", "tools"),
    ((FunctionTool("get weather", "", ""),), "", "", "tools[0].name"),
    ((FunctionTool("f", "", "[1]"),), "", "", "tools[0].parameters_json"),
    ((FunctionTool("f", "", "{"),), "", "", "tools[0].parameters_json"),
])
def test_tool_fields_that_cannot_be_honoured_are_refused_naming_the_field(
        tools: tuple[FunctionTool, ...], choice: str, function: str, param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        chat_tools(tools, choice, function, None)
    assert raised.value.param == param


def test_options_carry_the_format_and_the_template_kwargs() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}}
    options = chat_options(json.dumps({"type": "json_schema", "json_schema": {
        "name": "s", "schema": schema, "strict": True}}), '{"enable_thinking": false}')
    assert options == ChatOptions(canonical_json({"schema": schema, "type": "json_schema"}),
                                  '{"enable_thinking":false}')
    assert chat_options('{"type": "text"}', "") is NO_OPTIONS
    assert chat_options("", "") is NO_OPTIONS


@pytest.mark.parametrize(("response_format", "kwargs", "param"), [
    ('{"type": "grammar"}', "", "response_format_json"),
    ('{"type": "json_schema", "json_schema": {"name": "bad name", "schema": {}}}', "", "response_format_json"),
    ('{"type": "json_schema", "json_schema": {"name": "s", "schema": {"not": {}}}}', "", "response_format_json"),
    ("", '{"enable_thinking": "yes"}', "chat_template_kwargs_json.enable_thinking"),
    ("", '{"reasoning_effort": "max"}', "chat_template_kwargs_json.reasoning_effort"),
    ("", '{"voice": "low"}', "chat_template_kwargs_json.voice"),
    ("", "[]", "chat_template_kwargs_json"),
])
def test_options_that_cannot_be_honoured_are_refused_naming_the_field(
        response_format: str, kwargs: str, param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        chat_options(response_format, kwargs)
    assert raised.value.param == param


def test_a_chat_answer_reads_reasoning_and_calls_from_the_jobs_own_prompt() -> None:
    tools = chat_tools((WEATHER,), "auto", "", None)
    thinking = ChatOptions("", '{"enable_thinking":true}')
    prompt = encode_chat_prompt(ASK, tools, thinking)
    text = 'plan</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Ur"}}\n</tool_call>'
    features = (CHAT_FEATURE_THINKING, CHAT_FEATURE_THINKS_WHEN_ENABLED)
    answer = chat_answer(prompt, text, features)
    assert answer is not None and answer.reasoning == "plan" and answer.content == ""
    assert [(c.name, json.loads(c.arguments)) for c in answer.calls] == [("get_weather", {"city": "Ur"})]
    plain = chat_answer(encode_chat_prompt(ASK), text, ())
    assert plain is not None and plain.content == text and not plain.calls and not plain.reasoning
    assert chat_answer("In the beginning", text, features) is None
