"""Reading tool calls out of output text, whole or streamed in any pieces, and the grammar that
forces one."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.chat import ChatTools, canonical_json
from contracts.tool_calls import STYLE_JSON, STYLE_TAGGED, CallReader, ParsedCall, call_grammar, parse_tool_calls

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = ParsedCall("get_weather", '{"city": "Paris"}')


@pytest.mark.parametrize(("text", "content", "calls"), [
    (CALL, "", (WEATHER,)),
    ("Let me look.\n" + CALL, "Let me look.\n", (WEATHER,)),
    (CALL + "\n" + CALL.replace("Paris", "Ur"), "\n", (WEATHER, ParsedCall("get_weather", '{"city": "Ur"}'))),
    ('{"name": "get_weather", "arguments": {"city": "Paris"}}', "", (WEATHER,)),
    ('  [{"name": "a", "parameters": {}}, {"name": "b", "arguments": "{\\"x\\": 1}"}]', "",
     (ParsedCall("a", "{}"), ParsedCall("b", '{"x": 1}'))),
    ("<tool_call>\nnot json\n</tool_call> then", "<tool_call>\nnot json\n</tool_call> then", ()),
    ("<tool_call>\n{\"name\": \"f\", \"argu", "<tool_call>\n{\"name\": \"f\", \"argu", ()),  # cut off
    ('{"city": "Paris"}', '{"city": "Paris"}', ()),  # JSON, but not a call
    ("And God said <tool", "And God said <tool", ()),
    ('Said {"name": "f", "arguments": {}}', 'Said {"name": "f", "arguments": {}}', ()),  # not the whole
])
def test_calls_are_read_out_and_the_rest_is_content(text: str, content: str,
                                                    calls: tuple[ParsedCall, ...]) -> None:
    parsed = parse_tool_calls(text)
    assert parsed.calls == calls
    assert parsed.content == content


pieces = st.sampled_from(["And ", "God ", "<tool_call>", "\n", "<tool", "_call>", "</tool_call>",
                          '{"name": "f", "arguments": {"a": 1}}', "{", "}", " said"])


@given(st.lists(pieces, max_size=12), st.data())
def test_streaming_in_any_pieces_reads_what_the_whole_text_reads(parts: list[str], data: st.DataObject) -> None:
    text = "".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    reader, shown = CallReader(), []
    for start, end in zip([0, *cuts], [*cuts, len(text)]):
        shown.append(reader.feed(text[start:end]))
    shown.append(reader.finish())
    whole = parse_tool_calls(text)
    assert "".join(shown) == whole.content and reader.calls == whole.calls


def test_content_goes_out_before_the_output_ends() -> None:
    reader = CallReader()
    assert reader.feed("And God said <to") == "And God said "
    assert reader.feed("ol_call>\n") == ""
    reader.feed('{"name": "f", "arguments": {}}\n</tool_call>')
    assert reader.calls == (ParsedCall("f", "{}"),)


def _tools(choice: str, parallel: bool = True) -> ChatTools:
    definition = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}
    return ChatTools((canonical_json(definition),), choice, parallel)


def test_only_a_required_or_named_choice_is_forced() -> None:
    assert call_grammar(_tools("auto"), STYLE_TAGGED) is None
    assert call_grammar(_tools("none"), STYLE_TAGGED) is None
    named = call_grammar(_tools("function:get_weather"), STYLE_TAGGED)
    assert named is not None and named.startswith("start: block\n")
    assert '"<tool_call>\\n"' in named
    args = json.loads(named.split("args_0: %json ", 1)[1].split("\n", 1)[0])
    assert args["additionalProperties"] is False  # a forced call names only declared parameters
    assert call_grammar(_tools("required"), STYLE_JSON).startswith('start: "[" block')
    assert call_grammar(_tools("required", parallel=False), STYLE_JSON).startswith("start: block")
    with pytest.raises(ValueError, match="names no offered tool"):
        call_grammar(_tools("function:get_time"), STYLE_TAGGED)
