"""What a model's chat template can do, read from its text: no model is loaded.

A template renders tools when it reads the `tools` variable (Qwen, Llama 3.1+,
Mistral and Hermes templates all do). Which way the model writes a call follows
from the template too: one that shows `<tool_call>` tags asks for Qwen/Hermes-style
calls, and any other for plain JSON objects (contracts/tool_calls.py).

A template that thinks writes `<think>`. Whether its generation prompt opens the block
itself (so the output starts inside it) is read by rendering the template once with
thinking left to its default and once with enable_thinking true; the gateway then knows
where the model's reasoning ends (contracts/reasoning.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from contracts.models import (
    CHAT_FEATURE_ENABLE_THINKING,
    CHAT_FEATURE_REASONING_EFFORT,
    CHAT_FEATURE_THINKING,
    CHAT_FEATURE_THINKS_BY_DEFAULT,
    CHAT_FEATURE_THINKS_WHEN_ENABLED,
    CHAT_FEATURE_TOOLS,
)
from contracts.reasoning import THINK_OPEN
from contracts.tool_calls import STYLE_JSON, STYLE_TAGGED, TOOL_CALL_OPEN

_READS_TOOLS = re.compile(r"\btools\b")


def template_text(directory: Path) -> str:
    """The default chat template of a model directory ("" when it has none)."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    config_path = directory / "tokenizer_config.json"
    if not config_path.is_file():
        return ""
    template = json.loads(config_path.read_text()).get("chat_template") or ""
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template", "") for t in template if t.get("name") == "default"), "")
    return template if isinstance(template, str) else ""


def renders_tools(template: str) -> bool:
    return bool(_READS_TOOLS.search(template))


def reads_variable(template: str, name: str) -> bool:
    return bool(re.search(rf"\b{re.escape(name)}\b", template))


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _opens_thinking(template: str, **kwargs: object) -> bool:
    """Whether the generation prompt ends inside a `<think>` block the template opened."""
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent)
    environment.globals["raise_exception"] = _raise
    try:
        rendered = environment.from_string(template).render(
            messages=[{"role": "user", "content": "hello"}], add_generation_prompt=True,
            bos_token="", eos_token="", **kwargs)
    except jinja2.TemplateError:  # a template that needs what a plain render lacks
        return False
    return rendered.rstrip().endswith(THINK_OPEN)


def chat_features(template: str) -> tuple[str, ...]:
    features = [CHAT_FEATURE_TOOLS] if renders_tools(template) else []
    if THINK_OPEN in template:
        features.append(CHAT_FEATURE_THINKING)
        if _opens_thinking(template):
            features.append(CHAT_FEATURE_THINKS_BY_DEFAULT)
    if reads_variable(template, "enable_thinking"):
        features.append(CHAT_FEATURE_ENABLE_THINKING)
        if THINK_OPEN in template and _opens_thinking(template, enable_thinking=True):
            features.append(CHAT_FEATURE_THINKS_WHEN_ENABLED)
    if reads_variable(template, "reasoning_effort"):
        features.append(CHAT_FEATURE_REASONING_EFFORT)
    return tuple(features)


def tool_call_style(template: str) -> str:
    return STYLE_TAGGED if TOOL_CALL_OPEN in template else STYLE_JSON
