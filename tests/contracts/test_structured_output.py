"""Which schemas the network decodes under, the grammar it builds, and the chat text that carries
a response format and template options."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.chat import (
    ChatFormatError,
    ChatMessage,
    ChatOptions,
    ChatTools,
    canonical_json,
    decode_chat,
    decode_chat_all,
    encode_chat_prompt,
)
from contracts.structured_output import (
    FORMAT_JSON_OBJECT,
    FORMAT_JSON_SCHEMA,
    SCHEMA_DEPTH_MAX,
    answer_rule,
    canonical_format,
    format_schema,
    schema_problem,
)
from contracts.tool_calls import STYLE_TAGGED, call_grammar, job_grammar

WEATHER = canonical_json({"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
ASK = (ChatMessage("user", "hi"),)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": ["string", "null"], "maxLength": 3}},
     "required": ["a"], "additionalProperties": False, "title": "T", "description": "d"},
    {"type": "array", "items": {"enum": [1, "x", None]}, "minItems": 1, "maxItems": 2},
    {"anyOf": [{"type": "integer"}, {"const": "none"}]},
    {"$defs": {"p": {"type": "boolean"}}, "type": "object", "properties": {"p": {"$ref": "#/$defs/p"}}},
])
def test_the_supported_features_pass(schema: dict) -> None:
    assert schema_problem(schema) is None


@pytest.mark.parametrize(("schema", "named"), [
    ({"type": "string", "pattern": "a+"}, "'pattern' (at the top level)"),
    ({"type": "object", "properties": {"when": {"type": "string", "format": "date"}}},
     "'format' (at properties.when)"),
    ({"oneOf": [{"type": "string"}]}, "'oneOf'"),
    ({"type": "number", "minimum": 0}, "'minimum'"),
    ({"type": "date"}, "type at the top level must be one of"),
    ({"$ref": "https://example.com/s.json"}, "must point into the schema's own $defs"),
    ({"$ref": "#/$defs/missing"}, "which the schema does not define"),
    ({"type": "array", "items": True}, "items at the top level must be a schema"),
    ({"enum": []}, "enum at the top level must list 1 to"),
    ({"type": "string", "maxLength": -1}, "maxLength at the top level must be a whole number"),
    ([], "must be a JSON object"),
])
def test_an_unsupported_feature_is_named_with_where_it_sits(schema: object, named: str) -> None:
    problem = schema_problem(schema)
    assert problem is not None and named in problem


def test_a_schema_nested_too_deep_is_refused() -> None:
    schema: dict = {"type": "string"}
    for _ in range(SCHEMA_DEPTH_MAX + 1):
        schema = {"type": "array", "items": schema}
    assert "deeper than" in (schema_problem(schema) or "")


def test_open_objects_are_closed_and_the_json_is_compact() -> None:
    schema = format_schema(canonical_format(FORMAT_JSON_SCHEMA, {
        "type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "null"}}}},
        "$defs": {"d": {"type": "object", "properties": {}}}}))
    assert schema["additionalProperties"] is False
    assert schema["properties"]["a"]["additionalProperties"] is False
    assert schema["$defs"]["d"]["additionalProperties"] is False
    assert schema["x-guidance"]["whitespace_flexible"] is False
    assert format_schema(canonical_format(FORMAT_JSON_OBJECT))["type"] == "object"


def test_the_job_grammar_forces_calls_first_then_the_answer() -> None:
    answer = answer_rule(canonical_format(FORMAT_JSON_OBJECT))
    required = ChatTools((WEATHER,), "required", True)
    assert job_grammar(required, STYLE_TAGGED, answer) == call_grammar(required, STYLE_TAGGED)
    auto = job_grammar(ChatTools((WEATHER,), "auto", True), STYLE_TAGGED, answer) or ""
    assert auto.startswith("start: block (\"\\n\" block)* | answer") and answer in auto
    assert job_grammar(ChatTools((WEATHER,), "none", True), STYLE_TAGGED, answer) == f"start: answer\n{answer}"
    assert job_grammar(ChatTools(), STYLE_TAGGED, None) is None


def test_options_make_a_version_3_text_that_round_trips() -> None:
    options = ChatOptions(canonical_json({"type": "json_object"}), canonical_json({"enable_thinking": True}))
    text = encode_chat_prompt(ASK, ChatTools(), options)
    assert json.loads(text)["v"] == 3
    assert decode_chat_all(text) == (ASK, ChatTools(), options)
    assert decode_chat(text) == (ASK, ChatTools())
    assert json.loads(encode_chat_prompt(ASK))["v"] == 1  # texts without options never change


def test_a_version_3_text_without_options_is_not_canonical() -> None:
    text = encode_chat_prompt(ASK, ChatTools((WEATHER,), "auto", True)).replace('"v":2', '"v":3')
    with pytest.raises(ChatFormatError):
        decode_chat_all(text)


_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                            lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)


@given(st.dictionaries(st.sampled_from(["enable_thinking", "reasoning_effort", "x"]), _json_values,
                       min_size=1, max_size=3),
       st.dictionaries(st.text(min_size=1, max_size=4), _json_values, min_size=1, max_size=3))
def test_any_options_round_trip(kwargs: dict, response_format: dict) -> None:
    options = ChatOptions(canonical_json(response_format), canonical_json(kwargs))
    text = encode_chat_prompt(ASK, ChatTools(), options)
    assert decode_chat_all(text)[2] == options
