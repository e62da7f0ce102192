"""What a model's chat template can do, read from its text: no model is loaded.

A template renders tools when it reads the `tools` variable (Qwen, Llama 3.1+,
Mistral and Hermes templates all do). Which way the model writes a call follows
from the template too: one that shows `<tool_call>` tags asks for Qwen/Hermes-style
calls, and any other for plain JSON objects (contracts/tool_calls.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from contracts.models import CHAT_FEATURE_TOOLS
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


def chat_features(template: str) -> tuple[str, ...]:
    return (CHAT_FEATURE_TOOLS,) if renders_tools(template) else ()


def tool_call_style(template: str) -> str:
    return STYLE_TAGGED if TOOL_CALL_OPEN in template else STYLE_JSON
