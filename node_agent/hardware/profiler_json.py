"""Shared reading of `system_profiler -json` documents.

One `system_profiler -json A B C` run prints one object with a key per data
type, each holding a list of item objects; the parsers each take their own key.
"""

from __future__ import annotations

import json

from node_agent.hardware.errors import HardwareParseError

JsonObject = dict[str, object]


def data_type_items(text: str, data_type: str) -> list[JsonObject]:
    """The item objects listed under data_type, e.g. "SPHardwareDataType"."""
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise HardwareParseError(f"system_profiler output is not JSON: {error}") from error
    if not isinstance(document, dict):
        raise HardwareParseError("system_profiler JSON is not an object")
    items = document.get(data_type)
    if items is None:
        raise HardwareParseError(f"system_profiler JSON has no {data_type}")
    return object_list(items, data_type)


def object_list(value: object, what: str) -> list[JsonObject]:
    """value as a list of JSON objects, or a parse error naming what it was."""
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise HardwareParseError(f"{what} is not a list of objects")
    return value


def text_field(item: JsonObject, key: str) -> str:
    """A string field, "" when absent; a parse error when it holds something else."""
    value = item.get(key, "")
    if not isinstance(value, str):
        raise HardwareParseError(f"{key} is not a string")
    return value.strip()
