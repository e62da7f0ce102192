"""What a chat template does, read from its text: tools, thinking, and the options it reads."""

from __future__ import annotations

import pytest

from contracts.models import (
    CHAT_FEATURE_ENABLE_THINKING,
    CHAT_FEATURE_REASONING_EFFORT,
    CHAT_FEATURE_THINKING,
    CHAT_FEATURE_THINKS_BY_DEFAULT,
    CHAT_FEATURE_THINKS_WHEN_ENABLED,
    CHAT_FEATURE_TOOLS,
)
from node_agent.chat_templates import chat_features, reads_variable
from node_agent.tiny_model.builder import CHAT_TEMPLATE, PLAIN_CHAT_TEMPLATE

# Qwen3's hybrid template, cut to its generation prompt: the model writes <think> itself.
QWEN3_HYBRID = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n"
                "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
                "{% endif %}{% endif %}")
# DeepSeek-R1's way: the generation prompt always opens the block.
ALWAYS_OPENS = ("{% for m in messages %}{{ m.content }}{% endfor %}"
                "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}")
BROKEN = "{% if messages %}{{ raise_exception('no') }}{% endif %}<think>"


@pytest.mark.parametrize(("template", "expected"), [
    (CHAT_TEMPLATE, {CHAT_FEATURE_TOOLS, CHAT_FEATURE_THINKING, CHAT_FEATURE_ENABLE_THINKING,
                     CHAT_FEATURE_THINKS_WHEN_ENABLED, CHAT_FEATURE_REASONING_EFFORT}),
    (PLAIN_CHAT_TEMPLATE, set()),
    (QWEN3_HYBRID, {CHAT_FEATURE_THINKING, CHAT_FEATURE_ENABLE_THINKING}),
    (ALWAYS_OPENS, {CHAT_FEATURE_THINKING, CHAT_FEATURE_THINKS_BY_DEFAULT}),
    (BROKEN, {CHAT_FEATURE_THINKING}),  # a template that raises on a plain render opens nothing
])
def test_features_follow_from_the_template(template: str, expected: set[str]) -> None:
    assert set(chat_features(template)) == expected


def test_a_variable_is_read_only_as_a_whole_word() -> None:
    assert reads_variable("{% if enable_thinking %}", "enable_thinking")
    assert not reads_variable("{% if enable_thinking_x %}", "enable_thinking")
