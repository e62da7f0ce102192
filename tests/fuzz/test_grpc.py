"""Every RPC with hostile messages (hypothesis over the protobuf descriptors) and with bytes
that are no message at all, against a real coordinator process.

No call may answer UNKNOWN or INTERNAL for input a client controls, the coordinator must
stay up, and afterwards it still runs an ordinary job to the end on a real node.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos.mlxnet.v1 import job_pb2, node_pb2
from tests.fuzz.conftest import Target, serves_a_normal_job
from tests.fuzz.hostile import (
    BASELINES,
    SERVER_FAILURES,
    Rpc,
    apply_mutations,
    call,
    every_rpc,
    mutation_of,
    raw_payloads,
    requests_for,
    sweep,
)

pytestmark = pytest.mark.e2e
PROBE_REFUSED_EVERY = 8  # a refused registration stores nothing; check that now and then
EXAMPLES = 10  # random messages per RPC, beside the sweep of every field's edges


def _metadata_choices(target: Target) -> st.SearchStrategy[tuple[tuple[str, str], ...]]:
    return st.sampled_from([
        target.session(),  # a real node's session (half the time): the node calls reach their logic
        target.session(),
        target.session(),
        target.session(),
        (),
        (("x-mlxnet-session", "not-a-session"),),
        (("authorization", "Bearer mlxk_not_a_key"),),
        (("authorization", "Bearer " + "k" * 5_000),),
        (("x-mlxnet-consumer", "../" + "c" * 3_000),),
    ])


@pytest.mark.parametrize("rpc", [rpc for rpc in every_rpc() if rpc.name != "Register"],
                         ids=lambda rpc: rpc.name)
def test_every_field_at_its_edges_never_gets_a_server_failure(target: Target, rpc: Rpc) -> None:
    """One field at a time at each of its edge values (sweep()), in an otherwise honest request,
    with a real node's session: then an honest node, consumer and visitor are still served."""
    target.register_honestly()
    metadata = target.session() if rpc.service.endswith("NodeService") else ()
    failures: list[str] = []
    with target.channel() as channel:
        for path, value in sweep(rpc.request):
            request = apply_mutations(BASELINES[rpc.name], [(path, value)])
            code = call(channel, rpc, [request.SerializeToString()], metadata)
            if code in SERVER_FAILURES:
                failures.append(f"{rpc.name} answered {code.name} to {_case(path, value)}")
            failures.extend(f"after {rpc.name} {_case(path, value)}: {problem}"
                            for problem in target.probe())
    assert failures == []


def test_every_registration_field_at_its_edges_never_gets_a_server_failure(target: Target) -> None:
    """The same sweep over Register, signed with the node's real key, so each value reaches
    as far as a stranger with a key pair can take it (an infinite bandwidth once got stored)."""
    failures: list[str] = []
    try:
        for index, (path, value) in enumerate(sweep(node_pb2.RegisterRequest.DESCRIPTOR)):
            code = target.register_mutated([(path, value)])
            if code in SERVER_FAILURES:
                failures.append(f"Register answered {code.name} to {_case(path, value)}")
            if code == grpc.StatusCode.OK or index % PROBE_REFUSED_EVERY == 0:  # what was stored
                failures.extend(f"after Register {_case(path, value)}: {problem}"
                                for problem in target.probe())
    finally:
        target.register_honestly()
    assert failures == []


def _case(path: tuple, value: object) -> str:
    shown_value = f"{len(value)} items" if isinstance(value, list) else repr(value)[:60]
    return f"{'.'.join(str(part) for part in path)} = {shown_value}"


@pytest.mark.parametrize("rpc", every_rpc(), ids=lambda rpc: rpc.name)
def test_hostile_messages_never_get_a_server_failure(target: Target, rpc: Rpc) -> None:
    failures: list[str] = []
    with target.channel() as channel:
        @given(requests=st.lists(requests_for(rpc), min_size=1,
                                 max_size=3 if rpc.client_streaming else 1),
               metadata=_metadata_choices(target))
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def hostile(requests: list, metadata: tuple[tuple[str, str], ...]) -> None:
            code = call(channel, rpc, [r.SerializeToString() for r in requests], metadata)
            if code in SERVER_FAILURES:
                failures.append(f"{rpc.name} answered {code.name} to {requests[0]!s:.300}")
            failures.extend(f"after {rpc.name}: {problem}" for problem in target.probe())
            assert failures == []

        hostile()
    assert failures == []


def test_hostile_registrations_signed_with_a_real_key_never_get_a_server_failure(target: Target) -> None:
    """The node's own key and signature around hostile hardware, models, lending and pods: what
    a stranger with a key pair can make the coordinator store (an infinite bandwidth once
    broke its index for good), then an honest node, consumer and visitor must be served."""
    failures: list[str] = []

    @given(changes=st.lists(mutation_of(node_pb2.RegisterRequest.DESCRIPTOR), min_size=1, max_size=3))
    @settings(max_examples=EXAMPLES * 2, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def registers(changes: list) -> None:
        code = target.register_mutated(changes)
        if code in SERVER_FAILURES:
            failures.append(f"Register answered {code.name} to {changes!s:.300}")
        failures.extend(f"after Register: {problem}" for problem in target.probe())
        assert failures == []

    try:
        registers()
    finally:
        target.register_honestly()


@pytest.mark.parametrize("rpc", every_rpc(), ids=lambda rpc: rpc.name)
def test_bytes_that_are_no_message_never_get_a_server_failure(target: Target, rpc: Rpc) -> None:
    """(Invalid UTF-8 under a tag the message does not use is an unknown field, and decodes.)"""
    with target.channel() as channel:
        codes = {call(channel, rpc, [payload], target.session()) for payload in raw_payloads()}
    assert target.alive()
    assert codes & SERVER_FAILURES == set()
    assert grpc.StatusCode.INVALID_ARGUMENT in codes


def test_the_coordinator_still_runs_a_normal_job_after_the_fuzzing(target: Target,
                                                                  tiny_model: Path) -> None:
    """Runs last in this module (pytest keeps file order): the same coordinator, fuzzed above."""
    job = serves_a_normal_job(target, tiny_model)
    assert job.status == job_pb2.JOB_STATUS_COMPLETED, job.error
    assert job.completion_tokens > 0
