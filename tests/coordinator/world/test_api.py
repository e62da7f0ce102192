"""MLX World over real HTTP: codes and messages, the operator key, live events, and no secrets served."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from coordinator.model import JobStatus
from coordinator.world import operator_keys
from tests.coordinator.world.conftest import SECRET_OUTPUT, SECRET_PROMPT, WorldEnv, add_job, add_node, pay_out_epoch
from tests.coordinator.world.server import serve_world

EVENT_WAIT_S = 60.0


def _request(url: str, *, key: str | None = None, method: str = "GET",
             body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method=method)
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


def _json(url: str, **kwargs: object) -> tuple[int, dict]:
    status, _, body = _request(url, **kwargs)  # type: ignore[arg-type]
    return status, json.loads(body)


@pytest.fixture
def served(world_env: WorldEnv) -> Iterator[tuple[str, WorldEnv, dict[str, str]]]:
    now = world_env.clock.now
    with world_env.session() as session:
        ids = {"mini": add_node(session, "Alice mini", "alice", now),
               "studio": add_node(session, "Bob studio", "bob", now, profile="m3-ultra-512")}
        ids["job"] = add_job(session, (ids["mini"],), now, operator="alice")
        ids["failed"] = add_job(session, (ids["studio"],), now, status=JobStatus.FAILED)
        _, ids["alice_key"] = operator_keys.create_operator_key(session, "alice", "", now)
    with serve_world(world_env.service) as (base, _):
        yield base + "/world", world_env, ids


def test_the_app_is_served_with_a_strict_content_policy(served: tuple[str, WorldEnv, dict[str, str]]) -> None:
    base, _, _ = served
    status, headers, body = _request(base)
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in headers["content-security-policy"] and b'src="/world/static/app.js"' in body
    status, headers, body = _request(base + "/static/merkle.js")
    assert status == 200 and "javascript" in headers["content-type"] and b"keccak256" in body
    assert _request(base + "/static/nothing.js")[0] == 404


def test_bad_requests_get_the_right_code_and_say_what_to_fix(served: tuple[str, WorldEnv, dict[str, str]]) -> None:
    base, _, ids = served
    status, body = _json(base + "/api/fleet?page=0")
    assert status == 400 and body["error"]["param"] == "page" and "from 1 to" in body["error"]["message"]
    assert _json(base + "/api/fleet?status=sleepy")[0] == 400
    status, body = _json(base + "/api/jobs/job-nope")
    assert status == 404 and "does not exist" in body["error"]["message"]
    status, body = _json(base + "/api/operator/proofs/abc", key=ids["alice_key"])
    assert status == 400 and body["error"]["param"] == "epoch"


def test_operator_routes_need_the_operators_key(served: tuple[str, WorldEnv, dict[str, str]]) -> None:
    base, _, ids = served
    status, headers, body = _request(base + "/api/operator/me")
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    assert "mlxnet keys create --operator" in json.loads(body)["error"]["message"]
    assert _json(base + "/api/operator/me", key="mlxo_0123456789abcdef_" + "z" * 40)[0] == 401
    status, headers, body = _request(base + "/api/operator/me", key=ids["alice_key"])
    assert status == 200 and headers["vary"] == "Authorization" and headers["cache-control"] == "no-store"
    assert [n["name"] for n in json.loads(body)["nodes"]] == ["Alice mini"]
    status, body = _json(base + "/api/operator/jobs", key=ids["alice_key"])
    assert status == 200 and [j["job_id"] for j in body["jobs"]] == [ids["job"]]


def test_regions_are_set_with_a_json_body(served: tuple[str, WorldEnv, dict[str, str]]) -> None:
    base, _, ids = served
    url = f"{base}/api/operator/nodes/{ids['mini']}/region"
    put = {"key": ids["alice_key"], "method": "PUT"}
    assert _json(url, body=b'{"region": "Europe/Lisbon"}', **put) == (200, {"node_id": ids["mini"],
                                                                          "region": "Europe/Lisbon"})
    assert _json(base + "/api/fleet?region=Europe/Lisbon")[1]["total"] == 1
    status, body = _json(url, body=b"not json", **put)
    assert status == 400 and "JSON" in body["error"]["message"]
    assert _json(url, body=b'{"area": "x"}', **put)[0] == 400
    assert _json(url, body=b'{"region": 5}', **put)[0] == 400
    assert _json(url, body=b'{"region": "' + b"x" * 2000 + b'"}', **put)[0] == 400
    assert _json(f"{base}/api/operator/nodes/{ids['studio']}/region", body=b'{"region": "x"}', **put)[0] == 403
    assert _json(url, body=b'{"region": "Europe/Lisbon"}', method="PUT")[0] == 401


def test_public_pages_serve_no_prompt_output_or_key(served: tuple[str, WorldEnv, dict[str, str]]) -> None:
    base, env, ids = served
    with env.session() as session:
        pay_out_epoch(session, {"alice": "0x" + "a1" * 20})
    public = ["", "/api/fleet", "/api/fleet?page_size=200", "/api/fleet/facets", "/api/pods", "/api/totals",
              f"/api/jobs/{ids['job']}", f"/api/jobs/{ids['failed']}"]
    for path in public:
        status, _, body = _request(base + path)
        text = body.decode()
        assert status == 200, path
        for secret in (SECRET_PROMPT, SECRET_OUTPUT, ids["alice_key"], "mlxo_", "mlxk_", "operator_id",
                       "alice", "session_token", "anonymous", "prompt_digest"):
            assert secret not in text, (path, secret)


def _events(url: str) -> Iterator[tuple[str, dict]]:
    """(event name, data) from a server-sent event stream, as they arrive, for at most EVENT_WAIT_S."""
    deadline = time.monotonic() + EVENT_WAIT_S
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=EVENT_WAIT_S / 2)
    connection.request("GET", parts.path, headers={"Accept": "text/event-stream"})
    response = connection.getresponse()
    assert response.status == 200 and response.headers["content-type"].startswith("text/event-stream")
    name = ""
    try:
        while line := response.readline():
            assert time.monotonic() < deadline, "the awaited event did not come"
            text = line.decode().rstrip("\n")
            if text.startswith("event: "):
                name = text[len("event: "):]
            elif text.startswith("data: "):
                yield name, json.loads(text[len("data: "):])
    finally:
        connection.close()


def test_live_events_announce_a_new_mac_and_end_when_the_world_closes(world_env: WorldEnv) -> None:
    with serve_world(world_env.service) as (base, world):
        stream = _events(base + "/world/api/events")
        first: dict[str, dict] = {}
        while "totals" not in first:  # a new page gets the version and epoch at once, totals by the first read
            name, data = next(stream)
            first.setdefault(name, data)
        assert set(first) == {"fleet", "totals", "epoch"} and first["epoch"] == {"last_closed": None, "anchored": 0}
        version = first["fleet"]["version"]
        with world_env.session() as session:
            add_node(session, "Newcomer", "carol", world_env.clock.now)
        # Either may come first: on PostgreSQL one read's statements can straddle the insert.
        seen_fleet = seen_totals = False
        for name, data in stream:
            seen_fleet = seen_fleet or (name == "fleet" and data["version"] > version)
            seen_totals = seen_totals or (name == "totals" and data["macs_total"] == 1)
            if seen_fleet and seen_totals:
                break
        assert seen_fleet and seen_totals
        world.close()
        assert list(stream) == []  # the stream ends: no connection outlives the server
