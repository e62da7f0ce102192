"""Chat messages travel as one canonical text: the job's prompt and the receipt's digest."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.chat import ROLES, ChatFormatError, ChatMessage, decode_chat_prompt, encode_chat_prompt, is_chat_prompt

messages = st.lists(st.builds(ChatMessage, st.sampled_from(ROLES), st.text(max_size=30)),
                    min_size=1, max_size=5).map(tuple)


@given(messages)
def test_canonical_text_decodes_to_the_same_messages(chat: tuple[ChatMessage, ...]) -> None:
    text = encode_chat_prompt(chat)
    assert decode_chat_prompt(text) == chat
    assert is_chat_prompt(text)


@pytest.mark.parametrize("text", [
    "In the beginning",
    '{"messages":[{"role":"user","content":"hi"}],"v":1}',  # keys not sorted
    '{"messages": [{"content": "hi", "role": "user"}], "v": 1}',  # spaces
    '{"messages":[{"content":"hi","role":"wizard"}],"v":1}',
    '{"messages":[{"content":5,"role":"user"}],"v":1}',
    '{"messages":[],"v":1}',
    '{"messages":[{"content":"hi","role":"user"}],"v":2}',
])
def test_anything_else_is_not_a_chat_prompt(text: str) -> None:
    assert not is_chat_prompt(text)
    with pytest.raises(ChatFormatError):
        decode_chat_prompt(text)
