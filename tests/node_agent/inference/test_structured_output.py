"""Structured output on the node: a JSON response format is decoded under its schema's grammar,
the verifier's replay applies the same grammar, and the tiny model (whose free output is word
salad) still answers with JSON that parses and matches the schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from contracts.chat import ChatMessage, ChatOptions, ChatTools, canonical_json, encode_chat_prompt
from contracts.receipts import FinishReason
from contracts.structured_output import FORMAT_JSON_OBJECT, FORMAT_JSON_SCHEMA, canonical_format
from contracts.tool_calls import parse_tool_calls
from node_agent.inference.engine import Engine, GenerationRequest, PromptRefused
from tests.node_agent.inference.test_tool_constraint import WEATHER, _checks

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "enum": [7, 30, 64]},
    "kind": {"enum": ["cat", "dog"]},
    "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    "home": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/place"}]}},
    "required": ["name", "age", "kind", "tags", "home"],
    "$defs": {"place": {"type": "object", "properties": {"city": {"enum": ["Paris", "Ur"]}},
                        "required": ["city"]}}}
ASK = (ChatMessage("user", "Describe a person as JSON."),)
MAX_TOKENS = 160


def _prompt(response_format: dict, kwargs: str = "", tools: ChatTools = ChatTools()) -> str:
    return encode_chat_prompt(ASK, tools, ChatOptions(canonical_json(response_format), kwargs))


def _generate(engine: Engine, model_dir: Path, prompt: str, temperature: float = 0.0,
              max_tokens: int = MAX_TOKENS, seed: int = 0):  # type: ignore[no-untyped-def]
    return engine.generate(GenerationRequest(str(model_dir), prompt, max_tokens, temperature, 1.0,
                                             seed, "job-json"), 4096, lambda *_: True)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_json_schema_answer_parses_validates_and_passes_the_replay(
        tiny_model_dir: Path, temperature: float) -> None:
    engine = Engine()
    prompt = _prompt(canonical_format(FORMAT_JSON_SCHEMA, PERSON))
    result = _generate(engine, tiny_model_dir, prompt, temperature, seed=5)
    assert result.finish_reason is FinishReason.END_TOKEN  # the grammar ended it
    jsonschema.validate(json.loads(result.text), PERSON)
    assert set(json.loads(result.text)) == set(PERSON["properties"])  # objects are closed
    checks = _checks(engine, tiny_model_dir, prompt, result.token_ids, result.finish_reason,
                     temperature, seed=5)
    assert checks and all(checks)


def test_the_replay_refuses_a_free_output_under_a_json_format(tiny_model_dir: Path) -> None:
    engine = Engine()
    free = _generate(engine, tiny_model_dir, encode_chat_prompt(ASK), max_tokens=24)
    checks = _checks(engine, tiny_model_dir, _prompt(canonical_format(FORMAT_JSON_OBJECT)),
                     free.token_ids, free.finish_reason)
    assert not checks[0]


def test_json_object_starts_an_object_and_runs_out_of_tokens_as_length(tiny_model_dir: Path) -> None:
    result = _generate(Engine(), tiny_model_dir, _prompt(canonical_format(FORMAT_JSON_OBJECT)),
                       max_tokens=6)
    assert result.text.startswith("{")
    assert result.finish_reason is FinishReason.LENGTH and len(result.token_ids) == 6


def test_tool_choice_auto_beside_a_format_answers_in_json_or_calls(tiny_model_dir: Path) -> None:
    tools = ChatTools((WEATHER,), "auto", False)
    result = _generate(Engine(), tiny_model_dir,
                       _prompt(canonical_format(FORMAT_JSON_SCHEMA, PERSON), tools=tools))
    parsed = parse_tool_calls(result.text)
    if not parsed.calls:
        jsonschema.validate(json.loads(result.text), PERSON)
    assert result.finish_reason is FinishReason.END_TOKEN


def test_template_options_reach_the_template(tiny_model_dir: Path) -> None:
    engine = Engine()
    plain = engine.count_prompt_tokens(str(tiny_model_dir), encode_chat_prompt(ASK))
    thinking = encode_chat_prompt(ASK, ChatTools(), ChatOptions("", canonical_json(
        {"enable_thinking": True, "reasoning_effort": "low"})))
    assert engine.count_prompt_tokens(str(tiny_model_dir), thinking) > plain


def test_a_template_option_the_template_does_not_read_is_refused(tiny_model_dir: Path) -> None:
    unread = encode_chat_prompt(ASK, ChatTools(), ChatOptions("", canonical_json({"voice": "low"})))
    with pytest.raises(PromptRefused, match="does not read voice"):
        _generate(Engine(), tiny_model_dir, unread)


def test_a_schema_the_network_does_not_support_is_refused_on_the_node_too(tiny_model_dir: Path) -> None:
    bad = {"schema": {"type": "string", "pattern": "a+"}, "type": FORMAT_JSON_SCHEMA}
    with pytest.raises(PromptRefused, match="pattern"):
        _generate(Engine(), tiny_model_dir, _prompt(bad))
