"""Tool calls in a model's output: how they are written, read back, and forced. Pure.

Two ways a model writes a call, chosen by its chat template (node_agent/chat_templates.py):

    tagged (Qwen, Hermes):  <tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>
    json (plain):           {"name": "f", "arguments": {...}}   (or a list of such objects)

The reader takes either, so the gateway can read any job's output text (the text of
the raw output tokens the receipt covers) without knowing the model's family: tagged
calls wherever they appear, a bare JSON call only when it is the whole output. A
block that does not parse as a call stays in the text, as the model wrote it.

When the consumer requires a call (tool_choice "required" or a named function), the
node decodes under a grammar that admits only well-formed calls to the offered tools
(`call_grammar`, in llguidance's Lark dialect), and the verifier replays under it too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from contracts.chat import FUNCTION_CHOICE, ChatTools

STYLE_TAGGED = "tagged"
STYLE_JSON = "json"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object's text


@dataclass(frozen=True)
class ParsedOutput:
    content: str
    calls: tuple[ParsedCall, ...]


def _call_from(value: object) -> ParsedCall | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict) or not value["name"]:
        return None
    return ParsedCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def parse_call_block(text: str) -> ParsedCall | None:
    """One call's JSON (the inside of a tagged block), or None when it is not one."""
    try:
        return _call_from(json.loads(text))
    except json.JSONDecodeError:
        return None


def parse_bare_json(text: str) -> tuple[ParsedCall, ...]:
    """The calls when the whole text is a JSON call or a list of calls; () otherwise."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return ()
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        return ()
    values = value if isinstance(value, list) else [value]
    calls = tuple(_call_from(v) for v in values)
    return calls if calls and all(c is not None for c in calls) else ()  # type: ignore[return-value]


def parse_tool_calls(text: str) -> ParsedOutput:
    """The text's calls and the content around them."""
    reader = CallReader()
    content = reader.feed(text) + reader.finish()
    return ParsedOutput(content, reader.calls)


def _held_prefix(text: str, marker: str) -> int:
    """How many characters at the end of text could begin marker."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class CallReader:
    """Reads output text as it streams: content goes out at once, calls as each one closes.

    feed() returns the content that is certainly not part of a call; `calls` grows as
    tagged blocks close; finish() returns what was held back (an unclosed block, or a
    whole output that turns out not to be a bare JSON call).
    """

    def __init__(self) -> None:
        self.calls: tuple[ParsedCall, ...] = ()
        self._pending = ""  # text not yet shown: a possible tag start, a block, or a JSON output
        self._in_block = False
        self._maybe_json: bool | None = None  # decided by the output's first visible character
        self._shown_any = False

    def feed(self, text: str) -> str:
        self._pending += text
        if self._maybe_json is None and self._pending.strip():
            self._maybe_json = not self._shown_any and self._pending.lstrip()[0] in "{["
        if self._maybe_json:
            return ""  # a bare JSON call can only be told at the end
        shown = []
        while True:
            if self._in_block:
                end = self._pending.find(TOOL_CALL_CLOSE)
                if end < 0:
                    break
                block, self._pending = self._pending[:end], self._pending[end + len(TOOL_CALL_CLOSE):]
                self._in_block = False
                call = parse_call_block(block.strip())
                if call is None:
                    shown.append(TOOL_CALL_OPEN + block + TOOL_CALL_CLOSE)
                else:
                    self.calls += (call,)
                continue
            start = self._pending.find(TOOL_CALL_OPEN)
            if start >= 0:
                shown.append(self._pending[:start])
                self._pending = self._pending[start + len(TOOL_CALL_OPEN):]
                self._in_block = True
                continue
            keep = _held_prefix(self._pending, TOOL_CALL_OPEN)
            shown.append(self._pending[:len(self._pending) - keep])
            self._pending = self._pending[len(self._pending) - keep:]
            break
        out = "".join(shown)
        self._shown_any = self._shown_any or bool(out.strip())
        return out

    def finish(self) -> str:
        """The content still held back, once the output has ended."""
        rest, self._pending = self._pending, ""
        if self._maybe_json:
            calls = parse_bare_json(rest)
            if calls:
                self.calls += calls
                return ""
            self._maybe_json = False
            return self.feed(rest) + self.finish()
        return TOOL_CALL_OPEN + rest if self._in_block else rest


# --- forcing a call ------------------------------------------------------------

def _lark_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _closed(schema: object) -> object:
    """The schema with objects closed where it leaves them open: a forced call names only the
    declared parameters (as OpenAI's strict mode asks), not keys the model makes up."""
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) if key in ("items", "additionalItems") else value
              for key, value in schema.items()}
    if isinstance(schema.get("properties"), dict):
        closed["properties"] = {name: _closed(value) for name, value in schema["properties"].items()}
        closed.setdefault("additionalProperties", False)
    return closed


def _arguments_schema(definition: dict) -> dict:
    schema = _closed(definition.get("function", {}).get("parameters") or {"type": "object"})
    assert isinstance(schema, dict)
    # Compact JSON: a small model left free to choose spaces may never stop choosing them.
    schema["x-guidance"] = {"whitespace_flexible": False, "item_separator": ", ",
                            "key_separator": ": "}
    return schema


def _call_rules(tools: ChatTools, style: str) -> tuple[str, list[str]]:
    """(the expression for the calls the choice admits, the rules it uses)."""
    definitions = [json.loads(d) for d in tools.definitions]
    if tools.choice.startswith(FUNCTION_CHOICE):
        wanted = tools.choice[len(FUNCTION_CHOICE):]
        definitions = [d for d in definitions if d.get("function", {}).get("name") == wanted]
        if not definitions:
            raise ValueError(f"tool choice {wanted!r} names no offered tool")
    rules, alternatives = [], []
    for number, definition in enumerate(definitions):
        head = _lark_string('{"name": "' + definition["function"]["name"] + '", "arguments": ')
        rules.append(f"call_{number}: {head} args_{number} \"}}\"")
        rules.append(f"args_{number}: %json {json.dumps(_arguments_schema(definition))}")
        alternatives.append(f"call_{number}")
    rules.append("call: " + " | ".join(alternatives))
    if style == STYLE_TAGGED:
        rules.append(f"block: {_lark_string(TOOL_CALL_OPEN + chr(10))} call "
                     f"{_lark_string(chr(10) + TOOL_CALL_CLOSE)}")
        several = "block (\"\\n\" block)*"
    else:
        rules.append("block: call")
        several = "\"[\" block (\", \" block)* \"]\""
    return several if tools.parallel and not tools.choice.startswith(FUNCTION_CHOICE) else "block", rules


def call_grammar(tools: ChatTools, style: str) -> str | None:
    """The grammar a required or named tool choice decodes under; None leaves the model free."""
    if tools.choice in ("auto", "none") or not tools.definitions:
        return None
    start, rules = _call_rules(tools, style)
    return "\n".join([f"start: {start}", *rules])


def job_grammar(tools: ChatTools, style: str, answer_rule: str | None) -> str | None:
    """The grammar a job decodes under: its forced calls, else its answer's format (with the
    calls tool choice auto also allows beside it), else None (the model is free).

    answer_rule is a rule named `answer` (contracts/structured_output.answer_rule)."""
    forced = call_grammar(tools, style)
    if forced is not None or answer_rule is None:
        return forced
    if tools.choice == "auto" and tools.definitions:
        calls, rules = _call_rules(tools, style)
        return "\n".join([f"start: {calls} | answer", *rules, answer_rule])
    return "\n".join(["start: answer", answer_rule])
