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


def _expressible(case) -> bool:  # type: ignore[no-untyped-def]
    """Leaves out the one rule of the chat body JSON Schema cannot state: a tool choice names
    one of the request's tools, which are named once each (published in tool_choice's
    description; tests/coordinator/gateway/test_tools_e2e.py checks its 400s)."""
    body = case.body if isinstance(case.body, dict) else {}
    choice, tools = body.get("tool_choice"), body.get("tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return not (isinstance(choice, dict) or choice == "required")
    names = [(t.get("function") or {}).get("name") for t in tools]
    if len(set(map(str, names))) != len(names):
        return False
    if isinstance(choice, dict):
        return (choice.get("function") or {}).get("name") in names
    return choice != "required" or bool(tools)


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
