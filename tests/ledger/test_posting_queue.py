"""ledger.posting_queue: a queued completion is posted exactly once, whatever the writer's
batches, retries and crashes, on SQLite and PostgreSQL.

Each "receipt" queues its completion in a committed transaction, as the coordinator's does.
The writer's passes are drawn: whole passes, passes for some jobs, passes rolled back before
their commit (a writer that died), and a writer process killed with SIGKILL mid-pass.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger import book, jobs
from ledger.book import JobStep, job_transfer_id
from ledger.model import TransferState
from ledger.policy import max_job_charge, price_job
from ledger.posting_queue import QUEUE_BATCH_MAX, QueuedCompletion, post_queued, queue_completion, queue_state
from ledger.storage import queue_store

PARAMETERS = 8 * 10**9
PROMPT_TOKENS, MAX_TOKENS = 100, 64
RESERVE = max_job_charge(PARAMETERS, PROMPT_TOKENS, MAX_TOKENS)
CONSUMER = ConsumerId("payer")
OPERATORS = (OperatorId("op-a"), OperatorId("op-b"))
HOLD_S = 600
_examples = itertools.count()


def _fund(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        jobs.open_consumer_account(session, CONSUMER)
        jobs.deposit_for_consumer(session, "deposit-payer", CONSUMER, 10**15)


def _receipt(engine: Engine, job_id: str, tokens: int, anonymous: bool, operator: OperatorId) -> QueuedCompletion:
    """Reserve (at submit), then queue the completion in the receipt's own committed transaction."""
    completion = QueuedCompletion(JobId(job_id), None if anonymous else CONSUMER, operator,
                                  price_job(PARAMETERS, PROMPT_TOKENS, tokens), HOLD_S)
    if not anonymous:
        with Session(engine) as session, session.begin():
            assert jobs.reserve_job(session, JobId(job_id), CONSUMER, RESERVE).ok
    with Session(engine) as session, session.begin():
        queue_completion(session, completion)
    return completion


def _post(engine: Engine, job_ids: list[str] | None = None, *, commit: bool = True) -> tuple[JobId, ...]:
    with Session(engine) as session:
        posted = post_queued(session, job_ids)
        assert posted.refused == ()
        if commit:
            session.commit()
        else:
            session.rollback()  # the writer died before its commit
    return posted.posted


def _assert_posted_once(engine: Engine, completion: QueuedCompletion) -> None:
    with Session(engine) as session:
        found = {t.id: t for t in book.transfers_for_job(session, completion.job_id)}
    price = completion.price
    credit = found.get(job_transfer_id(completion.job_id, JobStep.CREDIT))
    if price.operator_credit:
        assert credit is not None and credit.amount == price.operator_credit
        assert credit.state is TransferState.PENDING
    if completion.consumer_id is None:
        assert set(found) == ({credit.id} if credit else set())
        return
    post = found.get(job_transfer_id(completion.job_id, JobStep.POST))
    void = found.get(job_transfer_id(completion.job_id, JobStep.VOID))
    if price.consumer_charge:
        assert post is not None and post.amount == price.consumer_charge and void is None
    else:
        assert post is None and void is not None
    fee = found.get(job_transfer_id(completion.job_id, JobStep.FEE))
    assert (fee.amount if fee else 0) == price.network_fee


def _assert_ledger_sound(engine: Engine) -> None:
    with Session(engine) as session:
        assert book.verify_chain(session).ok
        assert book.verify_balances(session).ok


PASSES = st.lists(st.sampled_from(["all", "some", "crash", "twice"]), max_size=6)
JOBS = st.lists(st.tuples(st.integers(0, MAX_TOKENS), st.booleans(), st.sampled_from(OPERATORS)),
                min_size=1, max_size=10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(planned=JOBS, passes=PASSES, picks=st.randoms(use_true_random=False))
def test_every_queued_completion_is_posted_exactly_once(
        engine: Engine, planned: list[tuple[int, bool, OperatorId]], passes: list[str], picks) -> None:  # type: ignore[no-untyped-def]
    _fund(engine)
    example = next(_examples)
    completions = [_receipt(engine, f"ex{example}-job{index}", tokens, anonymous, operator)
                   for index, (tokens, anonymous, operator) in enumerate(planned)]
    ids = [str(c.job_id) for c in completions]
    posted: list[JobId] = []
    for kind in passes:
        if kind == "all":
            posted += _post(engine)
        elif kind == "some":
            posted += _post(engine, picks.sample(ids, picks.randint(1, len(ids))))
        elif kind == "crash":
            _post(engine, commit=False)
        else:  # the same jobs asked for twice in a row: the second finds nothing left
            first = _post(engine, ids)
            assert _post(engine, ids) == ()
            posted += first
    posted += _post(engine, ids)  # the writer catches up
    assert sorted(posted) == sorted(ids), "each queued completion was posted by exactly one pass"
    with Session(engine) as session:
        assert queue_store.queued_rows(session, ids, QUEUE_BATCH_MAX) == []
    for completion in completions:
        _assert_posted_once(engine, completion)
    _assert_ledger_sound(engine)


def test_two_writers_at_once_post_each_completion_once(engine: Engine) -> None:
    """The second writer waits on the ledger's lock, then finds the rows gone."""
    _fund(engine)
    completions = [_receipt(engine, f"pair-{index}", 10 + index, False, OPERATORS[index % 2]) for index in range(5)]
    first = Session(engine)
    assert len(post_queued(first).posted) == 5
    second: list[tuple[JobId, ...]] = []
    waiter = threading.Thread(target=lambda: second.append(_post(engine)))
    waiter.start()
    waiter.join(0.5)
    first.commit()
    first.close()
    waiter.join(30)
    assert second == [()]
    for completion in completions:
        _assert_posted_once(engine, completion)
    _assert_ledger_sound(engine)


_KILLED_WRITER = """
import sys, time
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from ledger.posting_queue import post_queued
url, search_path = sys.argv[1], sys.argv[2]
engine = create_engine(url, connect_args={"options": f"-csearch_path={search_path}"} if search_path else {})
session = Session(engine)
posted = post_queued(session)
print(len(posted.posted), flush=True)
time.sleep(600)  # killed here, between posting and its commit
"""


@pytest.fixture
def writer_process(engine: Engine) -> Iterator[list[str]]:
    """The command of a writer that posts every queued completion and is then killed before committing."""
    search_path = ""
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            search_path = connection.execute(text("SHOW search_path")).scalar_one()
    yield [sys.executable, "-c", _KILLED_WRITER, engine.url.render_as_string(hide_password=False), search_path]


def test_a_writer_killed_between_posting_and_commit_loses_and_doubles_nothing(
        engine: Engine, writer_process: list[str]) -> None:
    _fund(engine)
    completions = [_receipt(engine, f"killed-{index}", 5 * index, index == 3, OPERATORS[0]) for index in range(4)]
    with Session(engine) as session:
        head_before = book.chain_head(session)
    with subprocess.Popen(writer_process, stdout=subprocess.PIPE, text=True, env=os.environ.copy()) as writer:
        try:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "4"  # posted, holding the ledger's lock, not committed
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait(30)
    with Session(engine) as session:
        assert book.chain_head(session) == head_before, "nothing the killed writer posted survived"
        assert queue_state(session).queued == 4, "every completion is still queued"
    assert sorted(_post(engine)) == sorted(c.job_id for c in completions)
    assert _post(engine) == ()
    for completion in completions:
        _assert_posted_once(engine, completion)
    _assert_ledger_sound(engine)


def test_the_audit_counts_queued_completions_and_names_a_refused_one(engine: Engine) -> None:
    from ledger.full_audit import ExpectedCredit, audit

    _fund(engine)
    owed = _receipt(engine, "audit-owed", 20, False, OPERATORS[0])
    # Never reserved: the ledger refuses to post its charge, and the row stays for the audit.
    with Session(engine) as session, session.begin():
        queue_completion(session, QueuedCompletion(JobId("audit-unreserved"), CONSUMER, OPERATORS[1],
                                                   price_job(PARAMETERS, PROMPT_TOKENS, 5), HOLD_S))
    expected = [ExpectedCredit("audit-owed", OPERATORS[0], PARAMETERS, PROMPT_TOKENS, 20),
                ExpectedCredit("audit-unreserved", OPERATORS[1], PARAMETERS, PROMPT_TOKENS, 5)]
    with Session(engine) as session:
        report = audit(session, expected_credits=expected)
    assert (report.ok, report.queued_completions) == (True, 2)
    with Session(engine) as session:
        posted = post_queued(session)
        session.commit()
    assert posted.posted == (owed.job_id,) and [job_id for job_id, _ in posted.refused] == ["audit-unreserved"]
    with Session(engine) as session:
        report = audit(session, expected_credits=expected)
        assert queue_state(session).refused == 1
    assert report.queued_completions == 1
    assert [(d.check, d.subject) for d in report.differences] == [("queued", "queued:audit-unreserved")]
    _assert_posted_once(engine, owed)
