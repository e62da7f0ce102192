"""API keys, limits, reservations and what a job that ends early costs, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import event, select

from contracts.ids import JobId
from coordinator.errors import (
    InsufficientBalance,
    NoCapacityNow,
    NotFound,
    RateLimited,
    Unauthenticated,
)
from coordinator.model import ACTIVE_STATUSES, JobRecord, JobStatus, TokenChunk
from coordinator.money.api_keys import RATE_WINDOW_MS, KeyLimits, anonymous_caller, keys_of, rate_refusal
from coordinator.money.job_money import chargeable_price, prompt_tokens_bound
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows
from coordinator.storage.tables import api_keys
from ledger.policy import max_job_charge, price_job
from mlxnet import keys_cli
from node_agent.identity import load_or_create_identity
from tests.coordinator.gateway.service_harness import (
    MODEL,
    consumer_balance,
    make_service,
    new_consumer,
    register_node,
)
from tests.proof_helpers import signed_partial_receipt

MLX = 10**9


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    service = make_service(database_url)
    yield service
    service.db.dispose()


@pytest.fixture
def node(service: CoordinatorService, tmp_path: Path):  # type: ignore[no-untyped-def]
    return register_node(service, load_or_create_identity(tmp_path / "node.pem"), 4)


def _job(service: CoordinatorService, job_id: str) -> JobRecord:
    with service.db.transaction() as session:
        job = job_rows.job_by_id(session, job_id)
    assert job is not None
    return job


def test_only_a_hash_of_the_key_is_stored_and_revoked_keys_are_refused(
        service: CoordinatorService) -> None:
    consumer = new_consumer(service, "acme")
    with service.db.transaction() as session:
        stored = [tuple(str(v) for v in row) for row in session.execute(select(api_keys))]
    assert stored and all(consumer.key not in value for row in stored for value in row)
    assert consumer.caller.consumer_id == "acme"
    for bad in ("", "mlxk_nothex_x", consumer.key[:-2] + "zz", "Bearer " + consumer.key):
        with pytest.raises(Unauthenticated):
            service.jobs.authenticate_consumer(bad)
    keys_cli.revoke(service.db, consumer.caller.key.key_id)  # type: ignore[union-attr]
    with pytest.raises(Unauthenticated, match="revoked"):
        service.jobs.authenticate_consumer(consumer.key)


def test_anonymous_callers_only_when_allowed(database_url: str) -> None:
    closed, opened = make_service(database_url), make_service(database_url, allow_anonymous=True)
    with pytest.raises(Unauthenticated, match="API key is required"):
        closed.jobs.authenticate_consumer(None)
    assert opened.jobs.authenticate_consumer(None, "demo") == anonymous_caller("demo")
    for service in (closed, opened):
        service.db.dispose()


def test_a_keyed_job_reserves_its_most_and_a_cancel_before_tokens_releases_it(
        service: CoordinatorService, node) -> None:  # type: ignore[no-untyped-def]
    consumer = new_consumer(service, "acme")
    view = service.jobs.submit(consumer.submission(), consumer.caller)
    reserved = max_job_charge(MODEL.parameter_count, prompt_tokens_bound(view.job, MODEL), 8)
    assert view.job.reserved_base_units == reserved > 0
    assert consumer_balance(service, "acme").debits_pending == reserved
    service.jobs.cancel(view.job.job_id, consumer.caller)
    after = consumer_balance(service, "acme")
    assert (after.debits_pending, after.available) == (0, MLX)
    assert _job(service, view.job.job_id).billing_closed_at_ms is not None


@pytest.mark.parametrize("proven", [True, False], ids=["partial-receipt", "no-receipt"])
def test_a_cancel_mid_stream_charges_exactly_the_tokens_proven(
        service: CoordinatorService, node, tmp_path: Path, proven: bool) -> None:  # type: ignore[no-untyped-def]
    """Tokens streamed are charged (and their operator paid) only when a partial receipt proves
    them; without one the reservation is released whole (issue 28)."""
    consumer = new_consumer(service, "acme")
    job = service.jobs.submit(consumer.submission(max_tokens=50), consumer.caller).job
    partial = signed_partial_receipt(load_or_create_identity(tmp_path / "node.pem"), job, (1, 2, 3), 4,
                                     MODEL.weights_digest, service.clock.now_ms()) if proven else None
    service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, (1, 2, 3), "abc"), prompt_tokens=4,
                                partial=partial)
    service.jobs.cancel(job.job_id, consumer.caller)
    price = price_job(MODEL.parameter_count, 4, 3)
    charge = price.consumer_charge if proven else 0
    after = consumer_balance(service, "acme")
    assert (after.debits_pending, after.available) == (0, MLX - charge)
    cost = service.jobs.cost(job.job_id, consumer.caller)
    assert (cost.charged, cost.operator_credit, cost.paid_by) == (
        charge, price.operator_credit if proven else 0, "consumer")
    with service.db.transaction() as session:
        assert [key.spent_base_units for key in keys_of(session, "acme")] == [charge]


def test_a_job_its_node_fails_is_released_in_the_same_write(
        service: CoordinatorService, node) -> None:  # type: ignore[no-untyped-def]
    consumer = new_consumer(service, "acme")
    job = service.jobs.submit(consumer.submission(), consumer.caller).job
    assert consumer_balance(service, "acme").debits_pending > 0
    service.nodes.accept_failure(node, job.job_id, "prompt is 9000 tokens", "prompt_too_long")
    after = consumer_balance(service, "acme")
    assert (after.debits_pending, after.available) == (0, MLX)  # released with the failure
    failed = _job(service, job.job_id)
    assert failed.error_code == "prompt_too_long" and failed.billing_closed_at_ms is not None
    assert service.money.close_ended() == []  # nothing left for the sweep: closed once
    with service.db.transaction() as session:
        assert [key.spent_base_units for key in keys_of(session, "acme")] == [0]


def test_the_sweep_closes_a_job_the_scheduler_failed(
        service: CoordinatorService, node) -> None:  # type: ignore[no-untyped-def]
    consumer = new_consumer(service, "acme")
    job = service.jobs.submit(consumer.submission(), consumer.caller).job
    with service.db.transaction() as session:  # as the scheduler fails an unplaceable job
        assert job_rows.transition_job(session, job.job_id, ACTIVE_STATUSES | {JobStatus.QUEUED}, status=JobStatus.FAILED,
                                       error="unplaceable: gone", finished_at_ms=1)
    assert consumer_balance(service, "acme").debits_pending > 0
    assert service.money.close_ended() == [job.job_id]
    assert service.money.close_ended() == []  # closed once
    after = consumer_balance(service, "acme")
    assert (after.debits_pending, after.available) == (0, MLX)


def test_too_small_a_balance_refuses_before_anything_is_written(
        service: CoordinatorService, node) -> None:  # type: ignore[no-untyped-def]
    consumer = new_consumer(service, "poor", deposit_mlx=0)
    with pytest.raises(InsufficientBalance, match="deposit more"):
        service.jobs.submit(consumer.submission(request_id="r1"), consumer.caller)
    with service.db.transaction() as session:
        assert job_rows.queued_jobs(session, 10) == []
    assert consumer_balance(service, "poor").debits_pending == 0
    keys_cli.deposit(service.db, "poor", MLX)
    view = service.jobs.submit(consumer.submission(request_id="r1"), consumer.caller)
    assert view.job.reserved_base_units > 0  # the request id was still free


def test_spend_rate_and_concurrency_limits(service: CoordinatorService, node) -> None:  # type: ignore[no-untyped-def]
    one_job = max_job_charge(MODEL.parameter_count, len("In the beginning") + 8, 8)
    capped = new_consumer(service, "capped", limits=KeyLimits(spend_limit_base_units=one_job))
    service.jobs.submit(capped.submission(), capped.caller)
    with pytest.raises(InsufficientBalance, match="spend limit"):
        service.jobs.submit(capped.submission(), capped.caller)
    rated = new_consumer(service, "rated", limits=KeyLimits(requests_per_minute_max=1))
    service.jobs.submit(rated.submission(), rated.caller)
    with pytest.raises(RateLimited) as raised:
        service.jobs.submit(rated.submission(), rated.caller)
    assert 1 <= raised.value.retry_after_s <= 60
    single = new_consumer(service, "single", limits=KeyLimits(concurrent_jobs_max=1))
    first = service.jobs.submit(single.submission(), single.caller).job
    with pytest.raises(RateLimited, match="at once"):
        service.jobs.submit(single.submission(), single.caller)
    service.jobs.cancel(first.job_id, single.caller)
    service.jobs.submit(single.submission(), single.caller)


def test_a_consumer_sees_only_its_own_jobs(service: CoordinatorService, node) -> None:  # type: ignore[no-untyped-def]
    alice, bob = new_consumer(service, "alice"), new_consumer(service, "bob")
    job = service.jobs.submit(alice.submission(), alice.caller).job
    assert service.jobs.get(job.job_id, alice.caller).job.job_id == job.job_id
    for call in (lambda: service.jobs.get(job.job_id, bob.caller),
                 lambda: service.jobs.cancel(job.job_id, bob.caller),
                 lambda: service.jobs.cost(job.job_id, bob.caller),
                 lambda: next(iter(service.jobs.stream(job.job_id, lambda: True, bob.caller)))):
        with pytest.raises(NotFound):
            call()


def test_no_capacity_now_refuses_without_writing(service: CoordinatorService, tmp_path: Path) -> None:
    register_node(service, load_or_create_identity(tmp_path / "busy.pem"), max_concurrent_jobs=1)
    consumer = new_consumer(service, "acme")
    service.jobs.submit(consumer.submission(), consumer.caller, place_now=True)
    held = consumer_balance(service, "acme").debits_pending
    with pytest.raises(NoCapacityNow) as raised:
        service.jobs.submit(consumer.submission(), consumer.caller, place_now=True)
    assert raised.value.retry_after_s > 0
    assert consumer_balance(service, "acme").debits_pending == held


def test_rate_refusal_counts_the_window() -> None:
    limits = KeyLimits(requests_per_minute_max=2)
    assert rate_refusal(limits, [1_000], 0, 2_000) is None
    refusal = rate_refusal(limits, [1_000, 1_500], 0, 2_000)
    assert refusal is not None and refusal.retry_after_s == (1_000 + RATE_WINDOW_MS - 2_000) // 1000
    assert rate_refusal(KeyLimits(concurrent_jobs_max=3), [], 3, 0) is not None


@given(prompt_chars=st.integers(1, 5_000), max_tokens=st.integers(1, 4_000),
       prompt_tokens=st.integers(0, 10**6), made=st.integers(0, 10**6),
       chat=st.booleans())
def test_a_charge_never_exceeds_the_reservation(prompt_chars: int, max_tokens: int,
                                                prompt_tokens: int, made: int, chat: bool) -> None:
    job = JobRecord(job_id=JobId("job-x"), consumer_id="c", request_id=None, model_id=MODEL.model_id,
                    prompt="x" * prompt_chars, max_tokens=max_tokens, temperature=0.0, top_p=1.0,
                    seed=0, min_decode_tokens_per_s=0.0, context_tokens=1,
                    status=JobStatus.QUEUED, created_at_ms=0,
                    prompt_format="chat" if chat else "text")
    reserved = max_job_charge(MODEL.parameter_count, prompt_tokens_bound(job, MODEL), max_tokens)
    assert chargeable_price(job, MODEL, prompt_tokens, made).consumer_charge <= reserved


def test_a_job_placed_at_submit_is_returned_as_stored(service: CoordinatorService, node) -> None:  # type: ignore[no-untyped-def]
    """The submit builds its answer from what it wrote, without reading the job back."""
    consumer = new_consumer(service, "acme")
    view = service.jobs.submit(consumer.submission(max_tokens=8), consumer.caller)
    assert view.job.status is JobStatus.ASSIGNED and view.job.reserved_base_units > 0
    assert view.job == _job(service, view.job.job_id)
    assert view.chips == ("Apple M4 Max",)


def test_a_key_known_to_the_gateway_still_cannot_submit_once_revoked(
        service: CoordinatorService, node) -> None:  # type: ignore[no-untyped-def]
    consumer = new_consumer(service, "acme")
    caller = service.jobs.authenticate_consumer(consumer.key, to_submit=True)
    assert caller == consumer.caller
    keys_cli.revoke(service.db, consumer.caller.key.key_id)  # type: ignore[union-attr]
    remembered = service.jobs.authenticate_consumer(consumer.key, to_submit=True)  # no read: the submit checks
    with pytest.raises(Unauthenticated, match="revoked"):
        service.jobs.submit(consumer.submission(), remembered)
    with pytest.raises(Unauthenticated, match="revoked"):
        service.jobs.authenticate_consumer(consumer.key)
    after = consumer_balance(service, "acme")  # the refused submit reserved nothing
    assert (after.debits_pending, after.available) == (0, MLX)
    with service.db.transaction() as session:
        assert job_rows.queued_jobs(session, 10) == []


def _job_row_writes(service: CoordinatorService) -> list[str]:
    """Every INSERT into or UPDATE of the jobs table the engine runs, from now on."""
    seen: list[str] = []

    def count(conn, cursor, statement: str, *args: object) -> None:  # type: ignore[no-untyped-def]
        text = " ".join(statement.split()).lower()
        if text.startswith(("insert into jobs ", "update jobs ")):
            seen.append(text.split(" set ")[0] if text.startswith("update") else "insert into jobs")

    event.listen(service.db.engine, "before_cursor_execute", count)
    return seen


def test_a_keyed_submit_placed_at_once_writes_its_job_row_once(
        service: CoordinatorService, node) -> None:  # type: ignore[no-untyped-def]
    consumer = new_consumer(service, "acme")
    writes = _job_row_writes(service)
    job = service.jobs.submit(consumer.submission(), consumer.caller).job
    assert job.status is JobStatus.ASSIGNED and job.reserved_base_units > 0
    assert writes == ["insert into jobs"]  # placed and reserved, yet one write of its row
    stored = _job(service, job.job_id)
    assert (stored.status, stored.reserved_base_units, stored.attempt) == (
        JobStatus.ASSIGNED, job.reserved_base_units, 1)
    assert consumer_balance(service, "acme").debits_pending == job.reserved_base_units
