"""A node that dies before its first token is replaced without the client noticing; one that
dies mid-stream ends the stream with a clear error, and the consumer pays for what it got and
the node's partial receipts prove.

Real processes: the coordinator (keys required), node agents killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from mlx_lm import load, stream_generate

from contracts.commitments import CHUNK_TOKENS
from contracts.ids import ConsumerId, job_id_for_request
from ledger.book import balance
from ledger.jobs import consumer_account_id
from ledger.policy import price_job
from mlxnet.consumer import JobClient
from mlxnet.processes import spawn_node, wait_until_registered
from node_agent.model_files import describe_model
from tests.coordinator.gateway.conftest import MODEL_ID, GatewayNetwork, gateway_network

pytestmark = pytest.mark.e2e
PROMPT = "And the LORD said unto Noah"
MLX = 10**9


@pytest.fixture(params=["sqlite", "postgres"])
def network(request: pytest.FixtureRequest, tmp_path: Path,
            tiny_model_dir: Path) -> Iterator[GatewayNetwork]:
    with gateway_network(tmp_path, tiny_model_dir, request.param,
                         (("first", "m4-max-128", "alice"),)) as net:
        yield net


def _direct_text(model_dir: Path, max_tokens: int) -> str:
    model, tokenizer = load(str(model_dir))
    return "".join(r.text for r in stream_generate(model, tokenizer, PROMPT, max_tokens=max_tokens))


def _start_node(network: GatewayNetwork, name: str) -> None:
    child = spawn_node(network.work_dir, name, network.grpc_address,
                       [f"{MODEL_ID}={network.model_dir}"], profile="m3-ultra-512", operator="bob",
                       trust=network.trust)
    network.nodes.append(wait_until_registered(child))


def _kill(network: GatewayNetwork, name: str) -> None:
    child = next(node for node in network.nodes if node.name == name)
    child.kill()


def _consumer_balance(network: GatewayNetwork, consumer: str):  # type: ignore[no-untyped-def]
    with network.db.transaction() as session:
        return balance(session, consumer_account_id(ConsumerId(consumer)))


def test_failover_is_invisible_before_the_first_token_and_clear_after_it(
        network: GatewayNetwork) -> None:
    key = network.new_key("acme")
    client = network.client(key)
    first = network.nodes[0]
    os.kill(first.process.pid, signal.SIGSTOP)  # alive to the coordinator, but it never streams
    with JobClient(network.grpc_address, api_key=key, trust=network.trust) as grpc_client:
        job = grpc_client.submit(MODEL_ID, PROMPT, max_tokens=12, request_id="failover")
    assert list(job.node_ids) == [first.extra["node_id"]]
    assert job.job_id == job_id_for_request("acme", "failover")
    answers: list[object] = []
    waiting = threading.Thread(target=lambda: answers.append(client.completions.create(
        model=MODEL_ID, prompt=PROMPT, max_tokens=12, temperature=0,
        extra_headers={"Idempotency-Key": "failover"})))  # the same job, over HTTP
    waiting.start()
    _kill(network, "first")
    _start_node(network, "second")
    waiting.join()
    answer = answers[0]
    assert answer.choices[0].text == _direct_text(network.model_dir, 12)  # type: ignore[attr-defined]
    record = client.get(f"/jobs/{job.job_id}", cast_to=object)
    assert record["status"] == "completed" and record["attempt"] == 2
    assert [n["node_id"] for n in record["nodes"]] == [network.nodes[-1].extra["node_id"]]

    # Now the only node dies mid-stream.
    stream = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=2000,
                                       temperature=0, stream=True)
    received = [next(stream).choices[0].text]
    job_path = "/jobs/" + stream.response.headers["x-mlxnet-job-id"]
    # Past the first chunk of CHUNK_TOKENS tokens, so the node has signed a partial receipt.
    while client.get(job_path, cast_to=object)["usage"]["completion_tokens"] <= CHUNK_TOKENS + 8:
        received.append(next(stream).choices[0].text)
    _kill(network, "second")
    with stream, pytest.raises(openai.APIError, match="stopped mid-stream"):
        for chunk in stream:
            received.append(chunk.choices[0].text)
    failed = client.get("/jobs/" + stream.response.headers["x-mlxnet-job-id"], cast_to=object)
    assert failed["status"] == "failed" and failed["text"] == "".join(received)
    spec = describe_model(MODEL_ID, network.model_dir)
    charges = [price_job(spec.parameter_count, record["usage"]["prompt_tokens"],
                         record["usage"]["completion_tokens"]).consumer_charge,
               price_job(spec.parameter_count, failed["usage"]["prompt_tokens"],
                         failed["usage"]["completion_tokens"]).consumer_charge]
    # Charged (and its operator paid) only for the tokens its partial receipts prove.
    proven = failed["usage"]["completion_tokens"]
    assert proven >= CHUNK_TOKENS and proven % CHUNK_TOKENS == 0
    assert failed["cost"]["charged_base_units"] == charges[1] > 0
    assert failed["cost"]["operator_credit_base_units"] > 0
    after = _consumer_balance(network, "acme")
    assert after.debits_pending == 0 and after.available == 10 * MLX - sum(charges)
