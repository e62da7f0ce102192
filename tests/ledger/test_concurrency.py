"""Several coordinators settling the same jobs at once: each job is paid exactly once.

Each worker runs in its own thread with its own Session and commits per job, racing the
others on the same derived transfer ids. PostgreSQL serialises them on the chain-head
row lock; SQLite on its single-writer lock.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger import book, jobs
from ledger.storage import tables
from ledger.model import Balance, ResultCode
from ledger.policy import max_job_charge, price_job
from ledger.units import parse_mlx

WORKERS = 3
JOBS = [JobId(f"job-{index:04d}") for index in range(10)]
CONSUMER = ConsumerId("alice")
OPERATOR = OperatorId("bob")
PARAMETERS = 8 * 10**9
PRICE = price_job(PARAMETERS, prompt_tokens=500, completion_tokens=100)
RESERVED = max_job_charge(PARAMETERS, prompt_tokens=500, max_tokens=256)
DEPOSIT = parse_mlx("1")


def run_coordinator(engine: Engine, worker_index: int) -> list[ResultCode]:
    """Reserve and settle every job, each in its own transaction, like a coordinator would."""
    codes: list[ResultCode] = []
    order = JOBS[worker_index:] + JOBS[:worker_index]  # start at different jobs, then collide
    for job in order:
        with Session(engine) as session:
            reserved = jobs.reserve_job(session, job, CONSUMER, RESERVED)
            settled = jobs.settle_job(session, job, CONSUMER, OPERATOR, PRICE)
            assert reserved.ok and settled.ok, (reserved, settled)
            session.commit()
        codes.extend([reserved.code, *(result.code for result in settled.results)])
    return codes


def test_racing_coordinators_pay_each_job_once(engine: Engine) -> None:
    with Session(engine) as session:
        jobs.open_consumer_account(session, CONSUMER)
        assert jobs.deposit_for_consumer(session, "payment-1", CONSUMER, DEPOSIT).ok
        session.commit()
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        outcomes = [future.result() for future in [pool.submit(run_coordinator, engine, i) for i in range(WORKERS)]]
    codes = [code for outcome in outcomes for code in outcome]
    assert codes.count(ResultCode.CREATED) == len(JOBS) * 4  # reserve, post, credit, fee: once per job
    assert codes.count(ResultCode.EXISTS) == len(JOBS) * 4 * (WORKERS - 1)
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(tables.transfers)) == 1 + len(JOBS) * 4
        assert book.balance(session, jobs.operator_account_id(OPERATOR)) == Balance(
            credits_posted=len(JOBS) * PRICE.operator_credit
        )
        assert book.balance(session, jobs.consumer_account_id(CONSUMER)) == Balance(
            debits_posted=len(JOBS) * PRICE.consumer_charge, credits_posted=DEPOSIT
        )
        check = book.verify_chain(session)
        assert check.ok and check.transfers_checked == 1 + len(JOBS) * 4, check
        assert book.verify_balances(session).ok


def test_a_held_lock_makes_the_second_writer_wait_then_answer_exists(engine: Engine) -> None:
    with Session(engine) as session:
        jobs.open_consumer_account(session, CONSUMER)
        jobs.deposit_for_consumer(session, "payment-1", CONSUMER, DEPOSIT)
        session.commit()
    with Session(engine) as first, ThreadPoolExecutor(max_workers=1) as pool:
        assert jobs.reserve_job(first, JOBS[0], CONSUMER, RESERVED).code is ResultCode.CREATED

        def second_writer() -> ResultCode:
            with Session(engine) as second:
                code = jobs.reserve_job(second, JOBS[0], CONSUMER, RESERVED).code
                second.commit()
                return code

        waiting = pool.submit(second_writer)
        first.commit()  # releases the lock; the waiting writer now sees the committed reservation
        assert waiting.result(timeout=30) is ResultCode.EXISTS
