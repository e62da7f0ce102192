"""A thinking model's reasoning, told apart from its answer however the output is cut into chunks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.models import CHAT_FEATURE_THINKS_BY_DEFAULT, CHAT_FEATURE_THINKS_WHEN_ENABLED
from contracts.reasoning import ReasoningReader, split_reasoning, starts_inside


@pytest.mark.parametrize(("text", "inside", "expected"), [
    ("<think>\nhmm</think>\n\nYes.", False, ("\nhmm", "Yes.")),
    ("  <think>a</think>b", False, ("a", "b")),
    ("hmm\n</think>\nYes.", True, ("hmm\n", "Yes.")),
    ("still thinking", True, ("still thinking", "")),
    ("Plain answer <think>x</think>", False, ("", "Plain answer <think>x</think>")),
    ("<thi", False, ("", "<thi")),
    ("<think>unclosed", False, ("unclosed", "")),
    ("", True, ("", "")),
])
def test_whole_outputs_split(text: str, inside: bool, expected: tuple[str, str]) -> None:
    assert split_reasoning(text, inside) == expected


@pytest.mark.parametrize(("features", "enable", "inside"), [
    ((), None, False),
    ((CHAT_FEATURE_THINKS_BY_DEFAULT,), None, True),
    ((CHAT_FEATURE_THINKS_BY_DEFAULT,), False, False),
    ((CHAT_FEATURE_THINKS_WHEN_ENABLED,), None, False),
    ((CHAT_FEATURE_THINKS_WHEN_ENABLED,), True, True),
])
def test_the_output_starts_inside_when_the_prompt_opened_the_block(
        features: tuple[str, ...], enable: bool | None, inside: bool) -> None:
    assert starts_inside(features, enable) is inside


_pieces = st.lists(st.sampled_from(["<think>", "</think>", "<", "</", "think", ">", "a", " ", "\n", "é"]),
                   max_size=16)


@given(_pieces, st.booleans(), st.data())
def test_any_chunking_splits_as_the_whole_output_does(pieces: list[str], inside: bool,
                                                     data: st.DataObject) -> None:
    text = "".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    reader = ReasoningReader(inside)
    reasoning = answer = ""
    for start, end in zip([0, *cuts], [*cuts, len(text)]):
        more_reasoning, more_answer = reader.feed(text[start:end])
        reasoning, answer = reasoning + more_reasoning, answer + more_answer
    rest_reasoning, rest_answer = reader.finish()
    assert (reasoning + rest_reasoning, answer + rest_answer) == split_reasoning(text, inside)
