"""Lock order on PostgreSQL: a job's row before the ledger's write lock, on every path.

Cancelling a job locks its row, then resolves its payment (the ledger's chain head).
A receipt for the same job arriving meanwhile must queue on the job's row, not take
the chain head first: the other order deadlocked under load.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from contracts.ids import JobId
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from coordinator.config import CoordinatorConfig
from coordinator.errors import AlreadyDone
from coordinator.jobs.submission import Submission
from coordinator.model import JobStatus, TokenChunk
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows, node_rows
from coordinator.storage.database import Database, upgrade_schema
from node_agent.identity import load_or_create_identity
from tests.conftest import fresh_postgres_database
from tests.coordinator.verification.test_outcomes import (
    MODEL,
    POLICY,
    FakeClock,
    FixedDraws,
    _register,
)
from tests.proof_helpers import well_formed_commitment

WAIT_S = 30.0


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with fresh_postgres_database() as url:
        upgrade_schema(url)
        yield url


def _waiting_on_a_lock(admin: psycopg.Connection, until_s: float) -> bool:
    """True once another backend of this database waits on a row lock (polled, bounded)."""
    for _ in range(int(until_s / 0.01)):
        waiting = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()").fetchone()
        if waiting is not None and waiting[0] > 0:
            return True
        admin.execute("SELECT pg_sleep(0.01)")
    return False


def test_a_receipt_waits_on_the_jobs_row_before_the_ledger(postgres_url: str, tmp_path: Path) -> None:
    db = Database(postgres_url)
    service = CoordinatorService(db, FakeClock(), CoordinatorConfig(database_url=postgres_url, trust=POLICY),
                                 draws=FixedDraws())  # type: ignore[arg-type]
    identity = load_or_create_identity(tmp_path / "node.pem")
    _register(service, identity, "alice")
    job = service.submit_job(Submission(consumer_id="c", model_id=MODEL.model_id, prompt="Hello",
                                        max_tokens=8, temperature=0.0, top_p=1.0, seed=0,
                                        request_id="", min_decode_tokens_per_s=0.0)).job
    with db.transaction() as session:
        node = node_rows.node_by_id(session, identity.node_id)
    assert node is not None
    tokens = (5, 6, 7)
    service.accept_tokens(node, job.job_id, TokenChunk(0, tokens, "abc"), prompt_tokens=2)
    now = service.clock.now_ms()
    body = encode_receipt(Receipt(
        JobId(job.job_id), identity.node_id, MODEL.model_id, MODEL.weights_digest,
        prompt_digest("Hello"), 0.0, 1.0, 0, 8, output_digest(tokens), 2, 3, now, now,
        well_formed_commitment(3), FinishReason.END_TOKEN, now))
    outcome: list[object] = []

    def report() -> None:
        try:
            outcome.append(service.accept_receipt(node, job.job_id, body, identity.sign(body)))
        except AlreadyDone as refused:
            outcome.append(refused)

    plain = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain) as canceller, psycopg.connect(plain, autocommit=True) as admin:
        # What cancel_job does first: lock the job's row by moving it.
        canceller.execute("UPDATE jobs SET status = status WHERE job_id = %s", (job.job_id,))
        reporter = threading.Thread(target=report)
        reporter.start()
        assert _waiting_on_a_lock(admin, WAIT_S), "the receipt never blocked on the cancelled job"
        # Then the ledger's write lock: free, since the receipt has not taken it.
        canceller.execute("SET LOCAL lock_timeout = '10s'")
        canceller.execute("UPDATE ledger_chain_head SET last_sequence = last_sequence")
        canceller.rollback()
        reporter.join(WAIT_S)
    assert not reporter.is_alive()
    assert len(outcome) == 1 and not isinstance(outcome[0], AlreadyDone)
    with db.transaction() as session:
        assert job_rows.job_by_id(session, job.job_id).status is JobStatus.COMPLETED  # type: ignore[union-attr]
    db.dispose()


def test_a_keyed_submit_takes_the_ledger_before_its_keys_row(postgres_url: str, tmp_path: Path) -> None:
    """Closing a job locks the ledger, then corrects its key's spend. A submit with that key
    must queue on the ledger too, not hold the key's row while it waits (a deadlock)."""
    from tests.coordinator.gateway.service_harness import make_service, new_consumer, register_node

    service = make_service(postgres_url)
    register_node(service, load_or_create_identity(tmp_path / "node.pem"), 4)
    consumer = new_consumer(service, "acme")
    key_id = consumer.caller.key.key_id  # type: ignore[union-attr]
    submitted: list[object] = []
    with psycopg.connect(postgres_url.replace("postgresql+psycopg", "postgresql")) as closer, \
            psycopg.connect(postgres_url.replace("postgresql+psycopg", "postgresql"),
                            autocommit=True) as admin:
        closer.execute("UPDATE ledger_chain_head SET last_sequence = last_sequence")  # the ledger
        submit = threading.Thread(target=lambda: submitted.append(
            service.submit_job(consumer.submission(), consumer.caller)))
        submit.start()
        assert _waiting_on_a_lock(admin, WAIT_S), "the submit should wait for the ledger"
        closer.execute("SET lock_timeout = '5s'")
        closer.execute("UPDATE api_keys SET spent_base_units = spent_base_units WHERE key_id = %s",
                       (key_id,))  # as refund_spend: the key's row is free
        closer.commit()
        submit.join(WAIT_S)
    assert len(submitted) == 1 and submitted[0].job.status is JobStatus.ASSIGNED  # type: ignore[attr-defined]
    service.db.dispose()
