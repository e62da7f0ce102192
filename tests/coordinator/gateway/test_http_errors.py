"""Every error the API promises, through HTTP with the official client, and no reservation left.

The gateway runs in-process over a real database; the Mac is a registered fake
whose part (failing a job) the test plays.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest
from sqlalchemy import select

from coordinator.gateway.server import RunningGateway, start_gateway
from coordinator.model import ERROR_PROMPT_TOO_LONG, NodeRecord
from coordinator.money.api_keys import KeyLimits
from coordinator.service import CoordinatorService
from coordinator.storage.tables import jobs
from node_agent.identity import load_or_create_identity
from tests.coordinator.gateway.service_harness import (
    MODEL,
    Consumer,
    consumer_balance,
    make_service,
    new_consumer,
    register_node,
)


class Harness:
    def __init__(self, service: CoordinatorService, gateway: RunningGateway, node: NodeRecord) -> None:
        self.service, self.gateway, self.node = service, gateway, node
        self.base_url = f"http://127.0.0.1:{gateway.port}/v1"

    def client(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=30)

    def nothing_reserved(self, consumer: str) -> bool:
        return consumer_balance(self.service, consumer).debits_pending == 0


@pytest.fixture
def harness(database_url: str, tmp_path: Path) -> Iterator[Harness]:
    service = make_service(database_url, admission_wait_s=0.2)
    node = register_node(service, load_or_create_identity(tmp_path / "node.pem"), 1)
    gateway = start_gateway(service)
    yield Harness(service, gateway, node)
    gateway.stop()
    service.db.dispose()


def _chat(client: openai.OpenAI, **changes: object):  # type: ignore[no-untyped-def]
    arguments = dict(model=MODEL.model_id, messages=[{"role": "user", "content": "hi"}],
                     max_tokens=8, temperature=0)
    arguments.update(changes)
    return client.chat.completions.create(**arguments)  # type: ignore[call-overload]


def test_401_without_a_valid_key(harness: Harness) -> None:
    for key in ("sk-not-ours", "mlxk_0000000000000000_notavalidkeynotavalidkey"):
        with pytest.raises(openai.AuthenticationError) as raised:
            _chat(harness.client(key))
        assert raised.value.code == "invalid_api_key"
    for headers in ({}, {"authorization": "Basic eDp5"}):
        response = httpx2.get(f"{harness.base_url}/models", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize(("changes", "param"), [
    (dict(temperature=5), "temperature"),
    (dict(messages=[{"role": "wizard", "content": "hi"}]), "messages[0].role"),
    (dict(messages=[]), "messages"),
    (dict(n=2), "n"),
    (dict(max_tokens=100_000), "max_tokens"),
    (dict(top_logprobs=3), "top_logprobs"),
    (dict(stop=["a", "b", "c", "d", "e"]), "stop"),
])
def test_400_names_the_field(harness: Harness, changes: dict, param: str) -> None:
    consumer = new_consumer(harness.service, "acme")
    with pytest.raises(openai.BadRequestError) as raised:
        _chat(harness.client(consumer.key), **changes)
    assert raised.value.param == param and raised.value.type == "invalid_request_error"
    assert harness.nothing_reserved("acme")


def test_400_for_a_body_that_is_not_json(harness: Harness) -> None:
    consumer = new_consumer(harness.service, "acme")
    response = httpx2.post(f"{harness.base_url}/completions", content=b"{not json",
                           headers={"authorization": f"Bearer {consumer.key}",
                                    "content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["message"]


def test_402_when_the_balance_is_too_low(harness: Harness) -> None:
    consumer = new_consumer(harness.service, "poor", deposit_mlx=0)
    with pytest.raises(openai.APIStatusError) as raised:
        _chat(harness.client(consumer.key))
    assert raised.value.status_code == 402 and raised.value.code == "insufficient_balance"
    assert harness.nothing_reserved("poor")


def test_404_for_an_unknown_model_or_job(harness: Harness) -> None:
    consumer = new_consumer(harness.service, "acme")
    with pytest.raises(openai.NotFoundError) as raised:
        _chat(harness.client(consumer.key), model="no/such-model")
    assert raised.value.code == "model_not_found" and "test/small" in raised.value.message
    response = httpx2.get(f"{harness.base_url}/jobs/job-nope",
                          headers={"authorization": f"Bearer {consumer.key}"})
    assert response.status_code == 404
    assert harness.nothing_reserved("acme")


def _play_node(harness: Harness, fail_with: str) -> threading.Thread:
    """The fake Mac takes its next assignment and fails it the way a real node would."""
    def run() -> None:
        for job in harness.service.nodes.assignments(harness.node, lambda: True):
            harness.service.nodes.accept_failure(harness.node, job.job_id, "prompt is 5000 tokens; "
                                           "that exceeds the model's context of 4096", fail_with)
            return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_413_when_the_node_finds_the_prompt_over_the_context(harness: Harness) -> None:
    consumer = new_consumer(harness.service, "acme")
    node = _play_node(harness, ERROR_PROMPT_TOO_LONG)
    with pytest.raises(openai.APIStatusError) as raised:
        _chat(harness.client(consumer.key))
    node.join()
    assert raised.value.status_code == 413 and raised.value.code == "context_length_exceeded"
    assert raised.value.response.headers["x-mlxnet-job-id"].startswith("job-")
    harness.service.money.close_ended()  # the coordinator's sweep, run now
    assert harness.nothing_reserved("acme")


def test_429_with_retry_after_over_the_key_rate(harness: Harness) -> None:
    consumer = new_consumer(harness.service, "acme", limits=KeyLimits(requests_per_minute_max=1))
    harness.service.jobs.submit(consumer.submission(), consumer.caller)  # this minute's one request
    held = consumer_balance(harness.service, "acme").debits_pending
    with pytest.raises(openai.RateLimitError) as raised:
        _chat(harness.client(consumer.key))
    assert int(raised.value.response.headers["retry-after"]) >= 1
    assert consumer_balance(harness.service, "acme").debits_pending == held


def test_503_with_retry_after_when_no_mac_is_free(harness: Harness) -> None:
    consumer = new_consumer(harness.service, "acme")
    busy = harness.service.jobs.submit(consumer.submission(), consumer.caller)  # the only Mac's slot
    assert busy.job.node_ids == (harness.node.node_id,)
    held = consumer_balance(harness.service, "acme").debits_pending
    with pytest.raises(openai.InternalServerError) as raised:
        _chat(harness.client(consumer.key))
    assert raised.value.status_code == 503 and raised.value.code == "no_capacity"
    assert int(raised.value.response.headers["retry-after"]) >= 1
    assert "it was number 1 in the queue" in raised.value.message  # it waited its turn, first in line
    assert consumer_balance(harness.service, "acme").debits_pending == held


def test_a_consumer_cannot_see_another_consumers_job(harness: Harness) -> None:
    alice, bob = new_consumer(harness.service, "alice"), new_consumer(harness.service, "bob")
    job = harness.service.jobs.submit(alice.submission(), alice.caller).job
    for consumer, status in ((alice, 200), (bob, 404)):
        for path in (f"/jobs/{job.job_id}", f"/jobs/{job.job_id}/receipt"):
            response = httpx2.get(harness.base_url + path,
                                  headers={"authorization": f"Bearer {consumer.key}"})
            assert response.status_code == (404 if "receipt" in path else status), path


def test_models_list_their_live_capacity(harness: Harness) -> None:
    consumer: Consumer = new_consumer(harness.service, "acme")
    models = harness.client(consumer.key).models.list().data
    assert [m.id for m in models] == [MODEL.model_id]
    capacity = models[0].model_extra["capacity"]  # type: ignore[index]
    assert capacity["macs_serving"] == capacity["macs_available"] == 1
    assert capacity["predicted_decode_tokens_per_s"] > 0
    harness.service.jobs.submit(consumer.submission(), consumer.caller)  # fills the only Mac
    assert harness.client(consumer.key).models.list().data == []
    everything = httpx2.get(f"{harness.base_url}/models?all=true",
                            headers={"authorization": f"Bearer {consumer.key}"}).json()["data"]
    assert everything[0]["capacity"]["macs_available"] == 0


def test_503_when_the_gateway_streams_its_limit_and_no_job_is_made(
        database_url: str, tmp_path: Path) -> None:
    service = make_service(database_url)
    node = register_node(service, load_or_create_identity(tmp_path / "node.pem"), 2)
    gateway = start_gateway(service, streams_max=1)
    harness = Harness(service, gateway, node)
    consumer = new_consumer(service, "acme")
    ended: list[openai.APIStatusError] = []

    def hold_a_stream() -> None:
        with harness.client(consumer.key) as client, pytest.raises(openai.APIStatusError) as cut:
            _chat(client)  # its job is cancelled below
        ended.append(cut.value)

    first = threading.Thread(target=hold_a_stream, daemon=True)
    try:
        first.start()  # holds the gateway's one stream while its Mac says nothing
        job = next(iter(service.nodes.assignments(node, lambda: True)))
        held = consumer_balance(service, "acme").debits_pending
        with harness.client(consumer.key) as client, pytest.raises(
                openai.InternalServerError) as raised:
            _chat(client)
        assert raised.value.status_code == 503 and "streaming its limit" in raised.value.message
        assert consumer_balance(service, "acme").debits_pending == held  # the Mac had room
        with service.db.read_transaction() as session:
            made = session.execute(select(jobs.c.job_id).where(jobs.c.consumer_id == "acme"))
            assert made.scalars().all() == [job.job_id]
        service.jobs.cancel(job.job_id)
        first.join(30)
        assert [error.status_code for error in ended] == [502]
    finally:
        gateway.stop()
        service.db.dispose()
