"""The served OpenAPI spec, checked by schemathesis against the running gateway.

Requests generated from the spec (valid and invalid) must never get a server error,
and every response must match its documented status, headers and body schema. No
node is registered, so no generated request can start real work.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from contracts.structured_output import schema_problem
from coordinator.gateway.server import start_gateway
from tests.coordinator.gateway.service_harness import make_service, new_consumer


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('openapi') / Path('coordinator.db')}"
    service = make_service(url)
    key = new_consumer(service, "fuzzer").key
    gateway = start_gateway(service)
    yield f"http://127.0.0.1:{gateway.port}", key
    gateway.stop()
    service.db.dispose()


def _schema_in(body: dict) -> object:
    """The response format's JSON schema, on chat's body or the Responses API's."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and isinstance(response_format.get("json_schema"), dict):
        return response_format["json_schema"].get("schema")
    text = body.get("text")
    text_format = text.get("format") if isinstance(text, dict) else None
    return text_format.get("schema") if isinstance(text_format, dict) else None


def _expressible(case) -> bool:  # type: ignore[no-untyped-def]
    """Leaves out the one rule of the tool-calling bodies JSON Schema cannot state: a tool choice
    that asks for a call needs tools and may name only one of them, and tools are named once
    each (published in the descriptions; test_tools_e2e.py and test_anthropic_e2e.py check
    the 400s). Covers every shape: chat's, Anthropic's messages and the Responses API's."""
    body = case.body if isinstance(case.body, dict) else {}
    schema = _schema_in(body)  # a $ref names a def of its own schema, nesting is bounded (published)
    if isinstance(schema, dict) and schema_problem(schema) is not None:
        return False
    choice, tools = body.get("tool_choice"), body.get("tools")
    tools = tools if isinstance(tools, list) and all(isinstance(t, dict) for t in tools) else []
    names = [str((t.get("function") or {}).get("name") if "function" in t else t.get("name"))
             for t in tools]
    if len(set(names)) != len(names):
        return False
    if isinstance(choice, dict):
        if isinstance(choice.get("function"), dict):  # OpenAI's named function
            return str(choice["function"].get("name")) in names
        if choice.get("type") in ("tool", "function"):  # Anthropic's or the Responses API's
            return str(choice.get("name")) in names
        return choice.get("type") != "any" or bool(names)
    return choice != "required" or bool(names)


def test_the_api_keeps_its_published_contract(api: tuple[str, str]) -> None:
    base_url, key = api
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")

    @schema.auth()
    class ApiKey:  # the auth checks take it away, or spoil it, and expect a 401
        def get(self, case, context) -> str:  # type: ignore[no-untyped-def]
            return key

        def set(self, case, data: str, context) -> None:  # type: ignore[no-untyped-def]
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}

    # The consumer API's operations; MLX World's (/world) are served beside them.
    operations = [op for op in (result.ok() for result in schema.get_all_operations())
                  if op.path.startswith("/v1/")]
    assert {op.path for op in operations} >= {"/v1/chat/completions", "/v1/completions",
                                               "/v1/models", "/v1/jobs/{job_id}"}
    for operation in operations:
        @given(case=operation.as_strategy().filter(_expressible))
        @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
        def keeps_contract(case) -> None:  # type: ignore[no-untyped-def]
            case.call_and_validate()

        keeps_contract()


AGENT_FIELDS = {"/v1/chat/completions": ("response_format", "reasoning_effort", "chat_template_kwargs"),
                "/v1/responses": ("text",)}


def test_the_agent_fields_keep_the_contract_too(api: tuple[str, str]) -> None:
    """Structured output and the template options, generated from the spec that describes them:
    every case carries at least one of them."""
    base_url, key = api
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    spec = schema.raw_schema
    chat = spec["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    assert {"response_format", "reasoning_effort", "chat_template_kwargs"} <= set(chat)
    assert "ResponseFormatJsonSchema" in spec["components"]["schemas"]
    assert "reasoning_content" in spec["components"]["schemas"]["ChatMessageOut"]["properties"]
    for path, fields in AGENT_FIELDS.items():
        operation = schema[path]["POST"]

        def carries_one(case, fields=fields) -> bool:  # type: ignore[no-untyped-def]
            return _expressible(case) and isinstance(case.body, dict) and any(f in case.body for f in fields)

        @given(case=operation.as_strategy().filter(carries_one))
        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
        def keeps_contract(case) -> None:  # type: ignore[no-untyped-def]
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {key}"}
            case.call_and_validate()

        keeps_contract()
