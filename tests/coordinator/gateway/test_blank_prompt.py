"""The server's "prompt is empty" check agrees with the schema's prompt pattern, and that
pattern means the same in Python's regex engine as in pydantic's (and ECMA-262's: it spells
its characters out)."""

from __future__ import annotations

import re

import pydantic
from hypothesis import given
from hypothesis import strategies as st

from coordinator.gateway.schemas import NOT_WHITE_SPACE, PromptText
from coordinator.jobs.submission import is_blank

_PROMPT = pydantic.TypeAdapter(PromptText)


def _schema_accepts(text: str) -> bool:
    try:
        _PROMPT.validate_python(text)
    except pydantic.ValidationError:
        return False
    return True


@given(st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=8))
def test_a_prompt_is_blank_exactly_when_the_schema_refuses_it(text: str) -> None:
    assert is_blank(text) is not _schema_accepts(text)


@given(st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=8))
def test_the_pattern_reads_alike_in_python(text: str) -> None:
    assert (re.search(NOT_WHITE_SPACE, text) is not None) is _schema_accepts(text)


def test_ascii_separators_are_text_and_unicode_spaces_are_not() -> None:
    assert not is_blank("\x1d") and _schema_accepts("\x1d")
    assert is_blank("\x85") and not _schema_accepts("\x85")  # JSON Schema's \S would take it
    assert is_blank(" \t\u3000\u2009\n") and not _schema_accepts(" \t\u3000\u2009\n")
