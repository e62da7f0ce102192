"""Hostile inputs against a real coordinator process: how many were tried per RPC and per route,
and how many failed (an UNKNOWN, INTERNAL or 5xx answer, a crash, or an honest node, consumer
or visitor badly served afterwards). The target is 0 failures.

    .venv/bin/python -m bench.security [--random 40]

Per RPC: every field swept at its edge values (tests/fuzz/hostile.py: sweep), Register signed
with a real key and changed in flight, `--random` wholly or partly hostile messages from
hypothesis, and bytes that are no message. Per route: hostile query and path values, and
hostile bodies. Prints one table; exits 1 when anything failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
from hypothesis import HealthCheck, given, settings

from mlxnet.processes import start_coordinator
from node_agent.coordinator_client import CoordinatorClient
from node_agent.identity import load_or_create_identity
from protos.mlxnet.v1 import node_pb2
from tests.fuzz.conftest import PLAINTEXT, UNLIMITED_REGISTRATIONS, Target
from tests.fuzz.hostile import (
    BASELINES,
    GET_ROUTES,
    HOSTILE_TEXT,
    PATH_ROUTES,
    QUERY_NAMES,
    SERVER_FAILURES,
    Rpc,
    apply_mutations,
    call,
    every_rpc,
    quoted,
    raw_payloads,
    requests_for,
    sweep,
)


@dataclass
class Tally:
    surface: str
    tried: int = 0
    failed: int = 0
    first_failure: str = ""

    def record(self, ok: bool, what: Callable[[], str]) -> None:
        self.tried += 1
        if not ok:
            self.failed += 1
            self.first_failure = self.first_failure or what()


def _grpc_tallies(target: Target, random_examples: int) -> list[Tally]:
    tallies = []
    with target.channel() as channel:
        for rpc in every_rpc():
            tally = Tally(f"gRPC {rpc.name}")
            metadata = target.session() if rpc.service.endswith("NodeService") else ()
            if rpc.name == "Register":
                for path, value in sweep(node_pb2.RegisterRequest.DESCRIPTOR):
                    code = target.register_mutated([(path, value)])
                    problems = target.probe()
                    tally.record(code not in SERVER_FAILURES and not problems,
                                 lambda: f"{path} = {value!r:.40}: {code.name} {problems}")
                target.register_honestly()
            else:
                for path, value in sweep(rpc.request):
                    request = apply_mutations(BASELINES[rpc.name], [(path, value)])
                    code = call(channel, rpc, [request.SerializeToString()], metadata)
                    tally.record(code not in SERVER_FAILURES,
                                 lambda: f"{path} = {value!r:.40}: {code.name}")
                tally.record(not target.probe(), lambda: f"after the sweep: {target.probe()}")
            _random(channel, rpc, metadata, random_examples, tally)
            for payload in raw_payloads():
                code = call(channel, rpc, [payload], metadata)
                tally.record(code not in SERVER_FAILURES, lambda: f"bytes {payload!r}: {code.name}")
            target.register_honestly()
            tallies.append(tally)
    return tallies


def _random(channel: grpc.Channel, rpc: Rpc, metadata: tuple[tuple[str, str], ...], examples: int,
            tally: Tally) -> None:
    @given(request=requests_for(rpc))
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def hostile(request) -> None:  # type: ignore[no-untyped-def]
        if rpc.name == "Register":
            return  # swept above with a real signature; random envelopes only meet the signature check
        code = call(channel, rpc, [request.SerializeToString()], metadata)
        tally.record(code not in SERVER_FAILURES, lambda: f"{request!s:.80}: {code.name}")

    hostile()


def _http_tallies(target: Target) -> list[Tally]:
    tallies = []
    with httpx.Client(timeout=30) as client:
        def status(path_and_query: str, key: str = "mlxk_bench") -> int:
            request = client.build_request("GET", target.http_base_url,
                                           headers={"authorization": f"Bearer {key}"})
            request.url = httpx.URL(target.http_base_url + path_and_query)
            return client.send(request).status_code

        for route in GET_ROUTES:
            tally = Tally(f"GET {route}")
            for name in QUERY_NAMES:
                for value in HOSTILE_TEXT:
                    code = status(f"{route}?{name}={quoted(value)}")
                    tally.record(code < 500, lambda: f"{name}={value[:20]!r}: {code}")
            tallies.append(tally)
        for route in PATH_ROUTES:
            tally = Tally(f"GET {route.format('{id}')}")
            for value in HOSTILE_TEXT:
                if quoted(value):
                    code = status(route.format(quoted(value)))
                    tally.record(code < 500, lambda: f"{value[:20]!r}: {code}")
            tallies.append(tally)
        tallies.append(_chat_bodies(client, target))
    return tallies


def _chat_bodies(client: httpx.Client, target: Target) -> Tally:
    tally = Tally("POST /v1/chat/completions")
    contents = ["x\\ud800y", "\\udfff", "a\\u0000b", "x" * 100_000, "\\n" * 1_000]
    bodies = [b"", b"{", b"[]", b"\xff\xfe", b"{" * 10_000, b'{"model": 1}']
    bodies += [('{"model": "m", "messages": [{"role": "user", "content": "%s"}]}' % c).encode()
               for c in contents]
    bodies += [b'{"model": "m", "max_tokens": %s, "messages": []}' % n for n in (b"1e999", b"-1", b"NaN")]
    for body in bodies:
        code = client.post(target.http_base_url + "/v1/chat/completions", content=body,
                           headers={"content-type": "application/json"}).status_code
        tally.record(code < 500, lambda: f"{body[:30]!r}: {code}")
    big = client.post(target.http_base_url + "/v1/completions", content=b"x" * (50 << 20),
                      headers={"content-type": "application/json"}).status_code
    tally.record(big == 413, lambda: f"a 50 MB body answered {big}, not 413")
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=40, help="random hostile messages per RPC")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        coordinator = start_coordinator(work_dir, allow_anonymous=True, tls=False,
                                        extra_args=UNLIMITED_REGISTRATIONS)
        node = CoordinatorClient(coordinator.extra["address"], PLAINTEXT)
        try:
            target = Target(work_dir, coordinator, node, load_or_create_identity(work_dir / "k.pem"))
            target.register_honestly()
            tallies = _grpc_tallies(target, args.random) + _http_tallies(target)
            alive = target.alive() and not target.probe()
        finally:
            node.close()
            coordinator.stop()
    print(f"{'surface':<40} {'tried':>7} {'failed':>7}  first failure")
    for tally in tallies:
        print(f"{tally.surface:<40} {tally.tried:>7} {tally.failed:>7}  {tally.first_failure[:80]}")
    tried, failed = sum(t.tried for t in tallies), sum(t.failed for t in tallies)
    print(f"{'total':<40} {tried:>7} {failed:>7}")
    print(f"coordinator serving an honest node, consumer and visitor at the end: {alive}")
    return 0 if failed == 0 and alive else 1


if __name__ == "__main__":
    sys.exit(main())
