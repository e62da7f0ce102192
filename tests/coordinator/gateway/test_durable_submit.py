"""A completion's submit commits without waiting for the disk; nothing reaches the client
until Database.make_durable has returned, and the wait overlaps the node's start.
(make_durable itself: tests/coordinator/storage/test_durable_commits.py.)"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import openai

from coordinator.gateway.server import start_gateway
from coordinator.model import TokenChunk
from coordinator.storage.database import Database
from node_agent.identity import load_or_create_identity
from tests.coordinator.gateway.service_harness import MODEL, make_service, new_consumer, register_node

WAIT_S = 30


@contextlib.contextmanager
def _held_durability(db: Database, order: list[str]
                     ) -> Iterator[tuple[threading.Event, threading.Event]]:
    """make_durable, held until the test releases it: (entered, release)."""
    entered, release = threading.Event(), threading.Event()
    make_durable = db.make_durable

    def held() -> None:
        entered.set()
        assert release.wait(WAIT_S)
        make_durable()
        order.append("durable")

    db.make_durable = held  # type: ignore[method-assign]
    try:
        yield entered, release
    finally:
        release.set()


def test_the_first_token_waits_for_the_submit_to_be_durable(database_url: str,
                                                             tmp_path: Path) -> None:
    service = make_service(database_url)
    node = register_node(service, load_or_create_identity(tmp_path / "node.pem"))
    gateway = start_gateway(service)
    consumer = new_consumer(service, "acme")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{gateway.port}/v1", api_key=consumer.key,
                           max_retries=0, timeout=WAIT_S)
    texts: list[str] = []
    order: list[str] = []  # appended by both threads, in the order things happened
    answered = threading.Event()

    def consume() -> None:
        with client.completions.create(model=MODEL.model_id, prompt="Hi", max_tokens=8,
                                       stream=True) as stream:
            order.append("answered")
            answered.set()
            texts.append(next(chunk for chunk in stream if chunk.choices).choices[0].text)

    try:
        with _held_durability(service.db, order) as (entered, release):
            reader = threading.Thread(target=consume, daemon=True)
            reader.start()
            job = next(iter(service.assignments(node, lambda: True)))  # placed before durable
            assert entered.wait(WAIT_S)
            service.accept_tokens(node, job.job_id, TokenChunk(0, (1, 2), "ab"), prompt_tokens=2)
            # The first token is there to send: a gateway that did not wait would answer now.
            assert not answered.wait(0.3), "the client heard of the job before it was durable"
            release.set()
            reader.join(WAIT_S)
        assert order == ["durable", "answered"] and texts == ["ab"]
    finally:
        gateway.stop()
        service.db.dispose()
