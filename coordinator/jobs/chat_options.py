"""A chat job's tools, tool choice, response format and template options from plain values,
checked, as the gRPC edge receives them. Pure.

The HTTP gateway checks the same rules through its request schemas (coordinator/gateway/
schemas.py, tools.py and requests.py); both build the same contracts.chat values, so a job
is the same job whichever edge it came through. A refusal names the field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from contracts.chat import (
    FUNCTION_CHOICE,
    NO_OPTIONS,
    NO_TOOLS,
    TOOL_CHOICES,
    TOOLS_MAX,
    ChatOptions,
    ChatTools,
    canonical_json,
)
from contracts.reasoning import REASONING_EFFORTS
from contracts.structured_output import (
    FORMAT_JSON_OBJECT,
    FORMAT_JSON_SCHEMA,
    canonical_format,
    schema_problem,
)
from coordinator.errors import InvalidRequest

FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # as OpenAI
TEMPLATE_OPTIONS = {"enable_thinking": (bool,), "reasoning_effort": (str,)}
SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str
    parameters_json: str  # a JSON schema's text; "" for an object of any keys


def _json_object(text: str, param: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidRequest(f"{param} is not JSON: {error.msg}", param=param) from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"{param} must be a JSON object", param=param)
    return value


def _definition(tool: FunctionTool, index: int) -> str:
    if not FUNCTION_NAME.fullmatch(tool.name):
        raise InvalidRequest("a tool's name is 1 to 64 letters, digits, _ or -",
                             param=f"tools[{index}].name")
    function: dict = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    if tool.parameters_json:
        function["parameters"] = _json_object(tool.parameters_json, f"tools[{index}].parameters_json")
    return canonical_json({"function": function, "type": "function"})


def chat_tools(tools: tuple[FunctionTool, ...], choice: str, function: str,
               parallel: bool | None) -> ChatTools:
    """The tools and tool choice, checked against each other (as the gateway's tools.py)."""
    if len(tools) > TOOLS_MAX:
        raise InvalidRequest(f"tools holds {len(tools)} functions; the limit is {TOOLS_MAX}",
                             param="tools")
    if choice and choice not in TOOL_CHOICES:
        raise InvalidRequest(f"tool_choice must be one of {', '.join(TOOL_CHOICES)}",
                             param="tool_choice")
    if function and choice not in ("", "required"):
        raise InvalidRequest("tool_choice_function names a call the model must make; tool_choice "
                             "must then be empty or required", param="tool_choice_function")
    names = [tool.name for tool in tools]
    if not tools:
        if function or choice == "required":
            raise InvalidRequest("tool_choice asks for a call, but the request offers no tools",
                                 param="tool_choice")
        return NO_TOOLS
    if len(set(names)) != len(names):
        raise InvalidRequest("tools holds two functions of one name", param="tools")
    if function and function not in names:
        raise InvalidRequest(f"tool_choice_function names {function!r}, which is not among the "
                             "tools", param="tool_choice_function")
    definitions = tuple(_definition(tool, index) for index, tool in enumerate(tools))
    return ChatTools(definitions, FUNCTION_CHOICE + function if function else choice or "auto",
                     True if parallel is None else parallel)


def _response_format(text: str) -> str:
    value = _json_object(text, "response_format_json")
    kind = value.get("type")
    if kind == "text" and set(value) == {"type"}:
        return ""
    if kind == FORMAT_JSON_OBJECT and set(value) == {"type"}:
        return canonical_json(canonical_format(FORMAT_JSON_OBJECT))
    if kind != FORMAT_JSON_SCHEMA or set(value) != {"type", "json_schema"}:
        raise InvalidRequest("response_format_json must be {\"type\": \"text\"}, {\"type\": "
                             "\"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {...}}",
                             param="response_format_json")
    wrapper = value["json_schema"]
    if not isinstance(wrapper, dict) or not set(wrapper) <= {"name", "description", "schema", "strict"} \
            or not SCHEMA_NAME.fullmatch(str(wrapper.get("name", ""))):
        raise InvalidRequest("json_schema holds a name (1 to 64 letters, digits, _ or -), a schema, "
                             "and optionally description and strict", param="response_format_json")
    problem = schema_problem(wrapper.get("schema", {}))
    if problem:
        raise InvalidRequest(f"response_format_json cannot be used: {problem}",
                             param="response_format_json")
    return canonical_json(canonical_format(FORMAT_JSON_SCHEMA, wrapper.get("schema", {})))


def _template_kwargs(text: str) -> str:
    kwargs = _json_object(text, "chat_template_kwargs_json")
    for name, value in kwargs.items():
        kinds = TEMPLATE_OPTIONS.get(name)
        if kinds is None:
            raise InvalidRequest(f"chat_template_kwargs_json.{name} is not supported; supported: "
                                 f"{', '.join(TEMPLATE_OPTIONS)}", param=f"chat_template_kwargs_json.{name}")
        if not isinstance(value, kinds) or (name == "reasoning_effort" and value not in REASONING_EFFORTS):
            raise InvalidRequest(f"chat_template_kwargs_json.{name} has the wrong type or value",
                                 param=f"chat_template_kwargs_json.{name}")
    return canonical_json(kwargs) if kwargs else ""


def chat_options(response_format_json: str, template_kwargs_json: str) -> ChatOptions:
    """The answer's format and the template's options; empty texts leave them out."""
    options = ChatOptions(_response_format(response_format_json) if response_format_json else "",
                          _template_kwargs(template_kwargs_json) if template_kwargs_json else "")
    return options if options != ChatOptions() else NO_OPTIONS
