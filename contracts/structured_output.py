"""Structured output: which JSON schemas the network decodes under, and their grammar. Pure.

A chat's `response_format` asks for a JSON object (`json_object`) or JSON that matches a
schema (`json_schema`). The node decodes under a grammar that admits only such JSON
(node_agent/inference/constraints.py), and the verifier replays under the same grammar,
so structured output is as provable as free text. Strict or not, the schema is enforced.

Only the schema features below are supported; `schema_problem` names the first one that
is not, with where it sits, so the gateway refuses it with a 400 instead of ignoring it.
Objects the schema leaves open are closed (as OpenAI's strict mode requires): a small
model left free to invent keys may never stop.
"""

from __future__ import annotations

import json

FORMAT_JSON_OBJECT = "json_object"
FORMAT_JSON_SCHEMA = "json_schema"
SCHEMA_DEPTH_MAX = 16  # nested schemas, as deep as OpenAI allows (it says 10) and a little more
SCHEMA_NODES_MAX = 1_024  # subschemas in one schema
ENUM_VALUES_MAX = 1_000
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
# Keywords that only describe: accepted, and they do not shape the output.
ANNOTATIONS = frozenset({"title", "description", "$schema", "$id", "$comment", "default",
                         "examples"})
KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "items",
                      "enum", "const", "anyOf", "minItems", "maxItems", "minLength", "maxLength",
                      "$defs", "definitions", "$ref"}) | ANNOTATIONS
SUPPORTED = ("type (object, array, string, number, integer, boolean, null, or a list of them), "
             "properties, required, additionalProperties, items, enum, const, anyOf, minItems, "
             "maxItems, minLength, maxLength, $defs and local $ref")
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength")
_REF_PREFIXES = ("#/$defs/", "#/definitions/")


class _Walk:
    """Counts subschemas while schema_problem walks them."""

    def __init__(self, root: dict) -> None:
        self.root = root
        self.nodes = 0


def _where(path: str) -> str:
    return path or "the top level"


def _ref_problem(ref: object, walk: _Walk, path: str) -> str | None:
    if not isinstance(ref, str) or not ref.startswith(_REF_PREFIXES):
        return f"$ref at {_where(path)} must point into the schema's own $defs ('#/$defs/NAME')"
    prefix = next(p for p in _REF_PREFIXES if ref.startswith(p))
    table = walk.root.get(prefix[2:-1])
    if not isinstance(table, dict) or ref[len(prefix):] not in table:
        return f"$ref at {_where(path)} names {ref!r}, which the schema does not define"
    return None


def _type_problem(value: object, path: str) -> str | None:
    names = value if isinstance(value, list) else [value]
    if not names or not all(isinstance(n, str) and n in TYPES for n in names):
        return f"type at {_where(path)} must be one of {', '.join(TYPES)} (or a list of them)"
    return None


def _keyword_problem(key: str, value: object, walk: _Walk, path: str, depth: int) -> str | None:
    if key == "type":
        return _type_problem(value, path)
    if key in _COUNTS and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return f"{key} at {_where(path)} must be a whole number, 0 or more"
    if key == "required" and not (isinstance(value, list) and all(isinstance(n, str) for n in value)):
        return f"required at {_where(path)} must be a list of property names"
    if key == "enum" and not (isinstance(value, list) and 0 < len(value) <= ENUM_VALUES_MAX):
        return f"enum at {_where(path)} must list 1 to {ENUM_VALUES_MAX} values"
    if key == "$ref":
        return _ref_problem(value, walk, path)
    if key in ("properties", "$defs", "definitions"):
        if not isinstance(value, dict):
            return f"{key} at {_where(path)} must be an object of schemas"
        return next((p for name, sub in value.items()
                     if (p := _problem(sub, walk, f"{path}.{key}.{name}".lstrip("."), depth + 1))), None)
    if key == "anyOf":
        if not isinstance(value, list) or not value:
            return f"anyOf at {_where(path)} must be a non-empty list of schemas"
        return next((p for i, sub in enumerate(value)
                     if (p := _problem(sub, walk, f"{path}.anyOf[{i}]".lstrip("."), depth + 1))), None)
    if key in ("items", "additionalProperties"):
        if isinstance(value, bool):
            return None if key == "additionalProperties" else \
                f"items at {_where(path)} must be a schema (a boolean is not supported)"
        return _problem(value, walk, f"{path}.{key}".lstrip("."), depth + 1)
    return None


def _problem(schema: object, walk: _Walk, path: str, depth: int) -> str | None:
    walk.nodes += 1
    if walk.nodes > SCHEMA_NODES_MAX:
        return f"the schema holds more than {SCHEMA_NODES_MAX} subschemas"
    if depth > SCHEMA_DEPTH_MAX:
        return f"the schema nests deeper than {SCHEMA_DEPTH_MAX} levels (at {path})"
    if not isinstance(schema, dict):
        return f"the schema at {_where(path)} must be an object"
    for key, value in schema.items():
        if key not in KEYWORDS:
            return (f"the schema feature {key!r} (at {_where(path)}) is not supported; "
                    f"supported: {SUPPORTED}")
        problem = _keyword_problem(key, value, walk, path, depth)
        if problem:
            return problem
    return None


def schema_problem(schema: object) -> str | None:
    """Why the network cannot decode under this schema (None when it can)."""
    if not isinstance(schema, dict):
        return "the schema must be a JSON object"
    return _problem(schema, _Walk(schema), "", 0)


def _closed(schema: object) -> object:
    """Every object that lists properties and says nothing of others admits no others."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) if key in ("items", "anyOf", "additionalProperties") else value
              for key, value in schema.items()}
    for table in ("properties", "$defs", "definitions"):
        if isinstance(schema.get(table), dict):
            closed[table] = {name: _closed(value) for name, value in schema[table].items()}
    if isinstance(schema.get("properties"), dict):
        closed.setdefault("additionalProperties", False)
    return closed


def canonical_format(kind: str, schema: dict | None = None) -> dict:
    """The response format as a chat prompt carries it (contracts/chat.py)."""
    assert kind in (FORMAT_JSON_OBJECT, FORMAT_JSON_SCHEMA)
    if kind == FORMAT_JSON_OBJECT:
        return {"type": FORMAT_JSON_OBJECT}
    assert schema is not None and schema_problem(schema) is None
    return {"schema": schema, "type": FORMAT_JSON_SCHEMA}


def format_schema(response_format: dict) -> dict:
    """The schema the output is decoded under: closed objects, compact JSON."""
    if response_format["type"] == FORMAT_JSON_OBJECT:
        schema: dict = {"type": "object"}
    else:
        schema = _closed(response_format["schema"])  # type: ignore[assignment]
    # Compact JSON: a small model left free to choose spaces may never stop choosing them.
    return {**schema, "x-guidance": {"whitespace_flexible": False, "item_separator": ", ",
                                     "key_separator": ": "}}


def answer_rule(response_format: dict) -> str:
    """The Lark rule (llguidance's dialect) for an answer in this format."""
    return f"answer: %json {json.dumps(format_schema(response_format), sort_keys=True)}"
