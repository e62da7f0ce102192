"""Every HTTP route with hostile input, against a real coordinator process: schemathesis over the
whole served spec (the consumer API and MLX World), and a sweep of hostile query, path and body
values the spec does not describe (World's filters and pages). Each runs three times: with no
credentials, with a consumer's API key and with an operator's key (for the fuzzers' own node),
so the routes behind each key are fuzzed past their auth. No answer may be a 5xx, and an
honest consumer and visitor are served afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from coordinator.money.api_keys import KeyLimits
from coordinator.storage.database import Database
from coordinator.world.operator_keys import create_operator_key
from mlxnet import keys_cli
from protos.mlxnet.v1 import job_pb2
from tests.fuzz.conftest import Target, serves_a_normal_job
from tests.fuzz.hostile import (
    GET_ROUTES,
    HOSTILE_TEXT,
    PATH_ROUTES,
    QUERY_NAMES,
    quoted,
)

pytestmark = pytest.mark.e2e
EXAMPLES = 15  # per operation
CREDENTIALS = ("none", "consumer", "operator")
# Routes each kind of key opens: with that key, some answer 2xx, so the fuzzing got past auth.
OPENED_BY = {"consumer": "/v1/", "operator": "/world/api/operator/"}


@pytest.fixture(scope="module")
def api_key(target: Target) -> Iterator[str]:
    database = Database(target.database_url)
    _, key = keys_cli.create(database, "http-fuzzer", KeyLimits(), deposit_amount=10**9)
    database.dispose()
    yield key


@pytest.fixture(scope="module")
def operator_key(target: Target) -> Iterator[str]:
    """A key of the operator of the fuzzers' node (it registered as its own operator)."""
    database = Database(target.database_url)
    with database.transaction() as session:
        _, key = create_operator_key(session, target.identity.node_id, "http-fuzzer", 1)
    database.dispose()
    yield key


@pytest.fixture(scope="module")
def keys(api_key: str, operator_key: str) -> dict[str, str | None]:
    return {"none": None, "consumer": api_key, "operator": operator_key}


def _auth(key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"} if key else {}


@pytest.fixture(scope="module")
def http(target: Target) -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:  # one client: making one costs ~0.1 s (its TLS context)
        yield client


def _raw_get(http: httpx.Client, target: Target, path_and_query: str, key: str | None) -> int:
    """GET with the path and query sent as they are (percent-escapes included)."""
    request = http.build_request("GET", target.http_base_url, headers=_auth(key))
    request.url = httpx.URL(target.http_base_url + path_and_query)
    return http.send(request).status_code


@pytest.mark.parametrize("credentials", CREDENTIALS)
def test_every_documented_operation_with_generated_input_is_never_a_server_error(
        target: Target, keys: dict[str, str | None], credentials: str) -> None:
    schema = schemathesis.openapi.from_url(f"{target.http_base_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/chat/completions", "/world/api/fleet",
                                              "/world/api/operator/me"}
    failures: list[str] = []
    served: set[str] = set()  # paths that answered 2xx with these credentials
    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def never_a_server_error(case) -> None:  # type: ignore[no-untyped-def]
            if case.path.endswith("/events"):  # an endless event stream; swept below
                return
            headers = {name: value for name, value in (case.headers or {}).items()
                       if name.lower() != "authorization"}
            case.headers = {**headers, **_auth(keys[credentials])}
            try:
                response = case.call_and_validate(checks=[not_a_server_error], timeout=30)
                if response.status_code < 300:
                    served.add(case.path)
            except AssertionError as error:  # schemathesis's failure: keep it, and go on
                failures.append(f"{case.method} {case.path}: {str(error)[:300]}")
                raise

        try:
            never_a_server_error()
        except AssertionError:
            pass
    assert failures == []
    if credentials in OPENED_BY:  # the key was taken: its routes were fuzzed past their auth
        assert any(path.startswith(OPENED_BY[credentials]) for path in served), sorted(served)
    if credentials != "operator":  # (the consumer API is open to anonymous callers here)
        assert not any(path.startswith(OPENED_BY["operator"]) for path in served), sorted(served)
    assert target.probe() == []


@pytest.mark.parametrize("credentials", (*CREDENTIALS, "forged"))
def test_hostile_query_values_on_every_route_are_never_a_server_error(
        target: Target, keys: dict[str, str | None], http: httpx.Client, credentials: str) -> None:
    key = keys.get(credentials, "mlxo_not_an_operator_key")
    failures = []
    for route in GET_ROUTES:
        for name in QUERY_NAMES:
            for value in HOSTILE_TEXT:
                status = _raw_get(http, target, f"{route}?{name}={quoted(value)}", key)
                if status >= 500:
                    failures.append(f"GET {route}?{name}={value[:20]!r} answered {status}")
    assert failures == []
    if credentials == "operator":  # past the operator's auth: a page or a clear refusal, never 401
        assert _raw_get(http, target, "/world/api/operator/jobs?page=1", key) == 200
    assert target.probe() == []


@pytest.mark.parametrize("credentials", CREDENTIALS)
def test_hostile_path_values_on_every_route_are_never_a_server_error(
        target: Target, keys: dict[str, str | None], http: httpx.Client, credentials: str) -> None:
    failures = []
    for route in PATH_ROUTES:
        for value in HOSTILE_TEXT:
            escaped = quoted(value)
            if not escaped:
                continue
            status = _raw_get(http, target, route.format(escaped), keys[credentials])
            if status >= 500:
                failures.append(f"GET {route.format(value[:20])!r} answered {status}")
    assert failures == []


@pytest.mark.parametrize("content", ["x\\ud800y", "\\udfff", "a\\u0000b", "\\ud83d\\ude00"])
def test_chat_content_spelled_with_json_escapes_is_never_a_server_error(
        target: Target, api_key: str, content: str) -> None:
    """(For a model no node serves: a valid request waits for no Mac, it is refused at once.)"""
    body = ('{"model": "no/such-model", "max_tokens": 2, "messages": [{"role": "user", '
            '"content": "%s"}]}' % content).encode()
    response = httpx.post(f"{target.http_base_url}/v1/chat/completions", content=body, timeout=30,
                          headers={"authorization": f"Bearer {api_key}",
                                   "content-type": "application/json"})
    assert response.status_code < 500, response.text
    if "\\ud800" in content or content == "\\udfff":
        assert response.status_code == 400


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b"null", b"\xff\xfe", json.dumps({"region": 7}).encode(),
                                  json.dumps({"region": "x" * 2_000}).encode()])
def test_hostile_region_bodies_are_never_a_server_error(target: Target, operator_key: str,
                                                         body: bytes) -> None:
    for node_id, key in (("node-x", "mlxo_x"), (target.identity.node_id, operator_key)):
        response = httpx.put(f"{target.http_base_url}/world/api/operator/nodes/{node_id}/region",
                             content=body, timeout=30, headers={"authorization": f"Bearer {key}"})
        assert response.status_code < 500, response.text
        if key == operator_key:  # past auth: the body itself is refused, naming what is wrong
            assert response.status_code in (400, 422), response.text


def test_the_coordinator_still_runs_a_normal_job_after_the_fuzzing(target: Target,
                                                                  tiny_model: Path) -> None:
    job = serves_a_normal_job(target, tiny_model)
    assert job.status == job_pb2.JOB_STATUS_COMPLETED, job.error
