"""One job end to end on real parts: gRPC processes, MLX inference, receipts, the ledger."""

from __future__ import annotations

import concurrent.futures
import time

import pytest
from mlx_lm import load, stream_generate

from contracts.ids import OperatorId
from coordinator.storage.database import Database
from coordinator.verification.store import CheckStatus, CreditState
from ledger.book import balance
from ledger.jobs import operator_account_id
from ledger.policy import price_job
from mlxnet.checks_view import wait_for_checks
from mlxnet.consumer import JobClient, JobRequestError, StreamedTokens
from mlxnet.receipt_view import check_receipt_locally
from node_agent.model_files import describe_model
from protos.mlxnet.v1 import job_pb2
from protos.wire.channel import open_channel
from tests.e2e.conftest import MODEL_ID, Network

pytestmark = pytest.mark.e2e
PROMPTS = ("In the beginning", "And Noah", "And the LORD said unto Abram")


def _direct_greedy_text(model_dir, prompt: str, max_tokens: int) -> str:  # type: ignore[no-untyped-def]
    model, tokenizer = load(str(model_dir))
    return "".join(r.text for r in stream_generate(model, tokenizer, prompt, max_tokens=max_tokens))


def _run(network: Network, prompt: str, max_tokens: int = 24, **kwargs: object):  # type: ignore[no-untyped-def]
    with JobClient(network.address, trust=network.trust) as client:
        job = client.submit(MODEL_ID, prompt, max_tokens=max_tokens, **kwargs)
        chunks, final = [], None
        for item in client.stream(job.job_id):
            if isinstance(item, StreamedTokens):
                chunks.append(item)
            else:
                final = item
    assert final is not None
    return final, chunks


def _operator_balance(database_url: str, operator: str) -> int:
    db = Database(database_url)
    try:
        with db.transaction() as session:
            found = balance(session, operator_account_id(OperatorId(operator)))
            return found.net_posted if found else 0
    finally:
        db.dispose()


def test_jobs_stream_real_mlx_text_with_verified_receipts_and_credits(network: Network) -> None:
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        results = list(pool.map(lambda p: _run(network, p), PROMPTS))
    spec = describe_model(MODEL_ID, network.model_dir)
    credited_by_operator: dict[str, int] = {}
    node_operator = {network.nodes[0].extra["node_id"]: "alice",
                     network.nodes[1].extra["node_id"]: "bob"}
    for prompt, (job, chunks) in zip(PROMPTS, results):
        assert job.status == job_pb2.JOB_STATUS_COMPLETED, job.error
        streamed_text = "".join(c.text for c in chunks)
        assert streamed_text == job.text == _direct_greedy_text(network.model_dir, prompt, 24)
        token_ids = tuple(t for c in chunks for t in c.token_ids)
        assert [c.first_index for c in chunks] == sorted(c.first_index for c in chunks)
        check = check_receipt_locally(job.receipt.body, job.receipt.signature,
                                      job.signer_public_key, prompt, token_ids)
        assert check.ok, check.problems
        assert job.receipt_verified
        price = price_job(spec.parameter_count, job.prompt_tokens, job.completion_tokens)
        assert job.credited_base_units == price.operator_credit > 0
        operator = node_operator[job.node_ids[0]]
        credited_by_operator[operator] = credited_by_operator.get(operator, 0) + price.operator_credit
    # New nodes have every job replayed by the verifier; credits are posted once checks pass.
    checks = wait_for_checks(network.database_url, [job.job_id for job, _ in results])
    assert all(c.status is CheckStatus.PASSED and c.credit_state is CreditState.POSTED for c in checks)
    for operator in ("alice", "bob"):
        assert _operator_balance(network.database_url, operator) == credited_by_operator.get(operator, 0)


def test_coordinator_crash_loses_no_job_and_no_credit(network: Network) -> None:
    done, _ = _run(network, "And Abraham")
    wait_for_checks(network.database_url, [done.job_id])  # its credit is posted, not held
    with JobClient(network.address, trust=network.trust) as client:
        # Nodes are busy with nothing, so this one may be queued, assigned or running at the crash.
        in_flight = client.submit(MODEL_ID, "And God blessed", max_tokens=200)
    balances = {op: _operator_balance(network.database_url, op) for op in ("alice", "bob")}
    network.restart_coordinator(crash=True)
    with JobClient(network.address, trust=network.trust) as client:
        again = client.get(done.job_id)
        assert again.status == job_pb2.JOB_STATUS_COMPLETED
        assert again.text == done.text and again.receipt.body == done.receipt.body
        assert again.credited_base_units == done.credited_base_units
        final = [i for i in client.stream(in_flight.job_id) if not isinstance(i, StreamedTokens)][0]
    # A job cut off mid-stream by the crash fails cleanly; one not yet streaming completes.
    assert final.status in (job_pb2.JOB_STATUS_COMPLETED, job_pb2.JOB_STATUS_FAILED)
    if final.status == job_pb2.JOB_STATUS_COMPLETED:  # checked by the restarted coordinator
        assert wait_for_checks(network.database_url, [in_flight.job_id])[0].status is CheckStatus.PASSED
    after = {op: _operator_balance(network.database_url, op) for op in ("alice", "bob")}
    assert sum(after.values()) - sum(balances.values()) == (
        final.credited_base_units if final.status == job_pb2.JOB_STATUS_COMPLETED else 0)
    later, _ = _run(network, "And Sarah")  # nodes came back to the new coordinator
    assert later.status == job_pb2.JOB_STATUS_COMPLETED


@pytest.mark.parametrize(("kwargs", "code", "needle"), [
    (dict(model="no/such-model", prompt="hi"), "NOT_FOUND", "not served by any node"),
    (dict(prompt=""), "INVALID_ARGUMENT", "prompt is empty"),
    (dict(prompt="x" * 40_000), "INVALID_ARGUMENT", "the limit is"),
    (dict(prompt="hi", max_tokens=-1), "INVALID_ARGUMENT", "max_tokens"),
    (dict(prompt="hi", temperature=9.0), "INVALID_ARGUMENT", "temperature"),
])
def test_bad_submissions_get_clear_errors_and_write_nothing(network: Network, kwargs: dict,
                                                            code: str, needle: str) -> None:
    arguments = {"model": MODEL_ID, **kwargs}
    request_id = f"bad-{code}-{needle}"
    refused_at_ms = time.time_ns() // 1_000_000
    with JobClient(network.address, trust=network.trust) as client:
        with pytest.raises(JobRequestError) as raised:
            client.submit(arguments.pop("model"), arguments.pop("prompt"), **arguments,
                          request_id=request_id)
        assert raised.value.code == code and needle in raised.value.message
        # The same request id is still free: nothing was half-written under it, so this
        # submit creates a new job instead of returning a stored one.
        job = client.submit(MODEL_ID, "hello", max_tokens=4, request_id=request_id)
        assert job.created_at_ms >= refused_at_ms and job.status != job_pb2.JOB_STATUS_FAILED


def test_retried_submit_returns_the_same_job(network: Network) -> None:
    with JobClient(network.address, trust=network.trust) as client:
        first = client.submit(MODEL_ID, "And Lot", max_tokens=8, request_id="retry-1")
        second = client.submit(MODEL_ID, "And Lot", max_tokens=8, request_id="retry-1")
    assert first.job_id == second.job_id


def test_grpc_health_and_reflection_answer(network: Network) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with open_channel(network.address, network.trust)[0] as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="mlxnet.v1.JobService"), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        responses = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
        names = {s.name for r in responses for s in r.list_services_response.service}
    assert {"mlxnet.v1.JobService", "mlxnet.v1.NodeService"} <= names


def test_submit_command_streams_text_and_verifies_the_receipt(network: Network) -> None:
    import subprocess
    import sys

    completed = subprocess.run(
        [sys.executable, "-m", "mlxnet.cli", "submit", "--coordinator", network.address,
         *network.pin_flags, "--model", MODEL_ID, "--prompt", "And Isaac", "--max-tokens", "12"],
        capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert "receipt (verified)" in completed.stdout
    assert _direct_greedy_text(network.model_dir, "And Isaac", 12) in completed.stdout


def _mlxnet(*argv: str):  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "mlxnet.cli", *argv], capture_output=True,
                          text=True, timeout=120, check=False)


def test_dry_run_and_explain_show_where_and_why(network: Network) -> None:
    dry = _mlxnet("place", "--dry-run", "--model", MODEL_ID, "--context", "512",
                  "--coordinator", network.address, *network.pin_flags)
    assert dry.returncode == 0, dry.stderr
    assert "would place on node-" in dry.stdout and "chosen: node-" in dry.stdout
    too_fast = _mlxnet("place", "--dry-run", "--model", MODEL_ID, "--context", "512",
                       "--min-tokens-per-s", "1e6", "--coordinator", network.address, *network.pin_flags)
    assert too_fast.returncode == 0 and "never placeable" in too_fast.stdout
    absurd = _mlxnet("place", "--dry-run", "--model", MODEL_ID, "--context", "512",
                     "--min-tokens-per-s", "1e12", "--coordinator", network.address, *network.pin_flags)
    assert absurd.returncode == 1 and "INVALID_ARGUMENT: min_decode_tokens_per_s" in absurd.stderr
    unknown = _mlxnet("place", "--dry-run", "--model", "nope", "--context", "8",
                      "--coordinator", network.address, *network.pin_flags)
    assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr
    job, _ = _run(network, "And Rebekah", max_tokens=4)
    explained = _mlxnet("jobs", "explain", job.job_id, "--coordinator", network.address, *network.pin_flags)
    assert explained.returncode == 0 and "Macs:" in explained.stdout and "#1 " in explained.stdout
    got = _mlxnet("jobs", "get", job.job_id, "--coordinator", network.address, *network.pin_flags)
    assert got.returncode == 0 and "completed" in got.stdout and "receipt   verified" in got.stdout
