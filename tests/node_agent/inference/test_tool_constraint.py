"""A required tool call: the node decodes under the grammar of calls, and the verifier's replay
applies the same grammar, so a constrained output passes every token check and a free one does
not. On the project's tiny model, whose free output is word salad."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from contracts.chat import ChatMessage, ChatTools, ToolCall, canonical_json, encode_chat_prompt
from contracts.receipts import FinishReason
from contracts.tool_calls import parse_tool_calls
from coordinator.verification.tokens import Sampling, make_token_check
from coordinator.verification.tolerances import Tolerances
from node_agent.inference.engine import Engine, GenerationRequest, PromptRefused
from node_agent.tiny_model.builder import PLAIN_CHAT_TEMPLATE

WEATHER = canonical_json({"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Ur"]}},
                   "required": ["city"], "additionalProperties": False}}})
CLOCK = canonical_json({"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"],
    "additionalProperties": False}}})
ASK = (ChatMessage("user", "What is the weather in Paris?"),)
MAX_TOKENS = 96


def _prompt(choice: str, parallel: bool = False, messages: tuple[ChatMessage, ...] = ASK) -> str:
    return encode_chat_prompt(messages, ChatTools((WEATHER, CLOCK), choice, parallel))


def _generate(engine: Engine, model_dir: Path, prompt: str, temperature: float = 0.0,
              seed: int = 0):  # type: ignore[no-untyped-def]
    return engine.generate(GenerationRequest(str(model_dir), prompt, MAX_TOKENS, temperature, 1.0,
                                             seed, "job-tools"), 4096, lambda *_: True)


def _checks(engine: Engine, model_dir: Path, prompt: str, output: tuple[int, ...],
            finish: FinishReason, temperature: float = 0.0, seed: int = 0) -> list[bool]:
    check = make_token_check(output, finish, Sampling(temperature, 1.0, seed),
                             engine.end_token_ids(str(model_dir)), Tolerances())
    return [c.ok for c in engine.replay(str(model_dir), prompt, output, check).token_checks]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_named_tool_choice_makes_a_well_formed_call_that_the_replay_accepts(
        tiny_model_dir: Path, temperature: float) -> None:
    engine = Engine()
    prompt = _prompt("function:get_weather")
    result = _generate(engine, tiny_model_dir, prompt, temperature, seed=11)
    parsed = parse_tool_calls(result.text)
    assert [call.name for call in parsed.calls] == ["get_weather"]
    assert json.loads(parsed.calls[0].arguments)["city"] in ("Paris", "Ur")
    assert parsed.content.strip() == ""
    assert result.finish_reason is FinishReason.END_TOKEN  # the grammar ended it
    checks = _checks(engine, tiny_model_dir, prompt, result.token_ids, result.finish_reason,
                     temperature, seed=11)
    assert checks and all(checks)


def test_required_picks_among_the_offered_tools_only(tiny_model_dir: Path) -> None:
    result = _generate(Engine(), tiny_model_dir, _prompt("required"))
    calls = parse_tool_calls(result.text).calls
    assert calls and calls[0].name in ("get_weather", "get_time")


def test_the_replay_refuses_a_free_output_under_the_constraint(tiny_model_dir: Path) -> None:
    engine = Engine()
    free = _generate(engine, tiny_model_dir, _prompt("auto"))
    assert not parse_tool_calls(free.text).calls  # the tiny model does not call on its own
    checks = _checks(engine, tiny_model_dir, _prompt("function:get_weather"), free.token_ids,
                     free.finish_reason)
    assert not checks[0]


def test_a_call_and_its_result_render_through_the_template(tiny_model_dir: Path) -> None:
    history = (*ASK, ChatMessage("assistant", "", (ToolCall("c1", "get_weather", '{"city": "Paris"}'),)),
               ChatMessage("tool", "Sunny, 21 C", (), "c1"))
    engine = Engine()
    with_result = engine.count_prompt_tokens(str(tiny_model_dir), _prompt("auto", messages=history))
    without = engine.count_prompt_tokens(str(tiny_model_dir), _prompt("auto"))
    assert with_result > without
    assert _generate(engine, tiny_model_dir, _prompt("auto", messages=history)).text


def test_a_template_without_tools_refuses_them(tiny_model_dir: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(tiny_model_dir, plain)
    config_path = plain / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "chat_template": PLAIN_CHAT_TEMPLATE}))
    with pytest.raises(PromptRefused, match="does not render tools"):
        _generate(Engine(), plain, _prompt("auto"))
