"""A failed check takes the node's stake: a share of its other held credits voided, a share of its
recent posted credits clawed back; and a job's check rate follows the node's stake and pace.

Real databases, a fake clock, fixed draws and no MLX, as in test_outcomes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.ids import OperatorId
from coordinator.config import CoordinatorConfig
from coordinator.service import CoordinatorService
from coordinator.storage.database import Database, upgrade_schema
from coordinator.verification.economics import StakePolicy
from coordinator.verification.store import CheckStatus, CreditState
from ledger.api import operator_debt
from node_agent.identity import load_or_create_identity
from tests.coordinator.verification.test_outcomes import (
    POLICY, WINDOW_S, FakeClock, FixedDraws, HoldsTheModel, _complete, _posted, _register,
)
from coordinator.verification import outcomes
from coordinator.verification.judge import CheckVerdict

# Sampling decided by the draw alone (no stake rate, no floor), the stake taken on failure.
TAKES_STAKE = dataclasses.replace(POLICY, stake=StakePolicy(work_cost_share_max=0.0, checks_per_window_min=0.0))
DEFAULT_STAKE = dataclasses.replace(POLICY, stake=StakePolicy())


def _service(database_url: str, policy) -> CoordinatorService:  # type: ignore[no-untyped-def]
    upgrade_schema(database_url)
    config = CoordinatorConfig(database_url=database_url, trust=policy)
    service = CoordinatorService(Database(database_url), FakeClock(), config, draws=FixedDraws())  # type: ignore[arg-type]
    service.checks.attach_verifier(HoldsTheModel())  # type: ignore[arg-type]
    return service


@pytest.fixture
def staked(database_url: str) -> Iterator[CoordinatorService]:
    service = _service(database_url, TAKES_STAKE)
    yield service
    service.db.dispose()


@pytest.fixture
def default_stake(database_url: str) -> Iterator[CoordinatorService]:
    service = _service(database_url, DEFAULT_STAKE)
    yield service
    service.db.dispose()


def _verdict(service: CoordinatorService, job_id: str, passed: bool) -> outcomes.VerdictOutcome:
    verdict = CheckVerdict(passed, () if passed else ("tokens 0-2: forged",))
    with service.db.transaction() as session:
        outcome = outcomes.record_verdict(session, job_id, verdict, "test-verifier", service.core.config.trust,
                                          service.clock.now_ms())
    assert outcome is not None
    return outcome


def _fail(service: CoordinatorService, job_id: str) -> outcomes.VerdictOutcome:
    return _verdict(service, job_id, passed=False)


def _paid(service: CoordinatorService, identity) -> str:  # type: ignore[no-untyped-def]
    """A job whose check passed: its credit posted."""
    job_id = _complete(service, identity, draw=0.0)
    assert _verdict(service, job_id, passed=True).passed
    return job_id


def test_a_failed_check_voids_half_the_held_stake_and_claws_back_half_the_posted(
        staked: CoordinatorService, tmp_path: Path) -> None:
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _register(staked, mallory, "mallory")
    paid = _paid(staked, mallory)
    credit = staked.checks.of_job(paid).operator_credit  # type: ignore[union-attr]
    assert credit > 0 and _posted(staked, "mallory") == credit
    held = []
    for _ in range(3):  # oldest first
        staked.clock.ms += 1  # type: ignore[attr-defined]
        held.append(_complete(staked, mallory, draw=0.5))
    cheated = _complete(staked, mallory, draw=0.0)
    outcome = _fail(staked, cheated)
    assert outcome.stake is not None
    # Half of three equal credits, in whole credits, newest first: the two latest.
    assert sorted(outcome.stake.forfeited_job_ids) == sorted(held[1:])
    assert outcome.stake.forfeited == 2 * credit and outcome.audited_job_ids == (held[0],)
    for job_id in held[1:]:
        check = staked.checks.of_job(job_id)
        assert check is not None and check.status is CheckStatus.FORFEITED
        assert check.credit_state is CreditState.VOIDED and f"failed the check of job {cheated}" in (check.reason or "")
    # The posted credit is within the claw-back horizon, beyond the window: half comes back.
    assert (outcome.stake.clawed_back, outcome.stake.owed) == ((credit + 1) // 2, 0)
    assert _posted(staked, "mallory") == credit - (credit + 1) // 2
    staked.clock.ms += WINDOW_S * 1000  # type: ignore[attr-defined]
    assert staked.money.release_due_credits() == []  # forfeited and audited credits are never released


def test_a_fresh_node_is_checked_on_every_job_and_a_staked_node_less(default_stake: CoordinatorService,
                                                                     tmp_path: Path) -> None:
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _register(default_stake, alice, "alice")
    first = default_stake.checks.of_job(_complete(default_stake, alice, draw=0.99))
    assert first is not None and first.check_rate == 1.0 and first.sampled  # nothing at stake yet
    for _ in range(12):  # its held credits grow; its trust rate alone is 0.01
        last = default_stake.checks.of_job(_complete(default_stake, alice, draw=0.99))
    assert last is not None and 0.01 < last.check_rate < 0.5
    assert last.check_rate == pytest.approx(max(2 / 13, 1.25 * 0.4 / (0.5 * (1 + 0.5 * 12))), rel=1e-3)


def test_a_debt_left_by_a_claw_back_is_repaid_from_the_next_credits(staked: CoordinatorService,
                                                                   tmp_path: Path) -> None:
    from coordinator.money import job_money

    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _register(staked, mallory, "mallory")
    with staked.db.transaction() as session:  # more than its balance holds: a debt
        assert job_money.claw_back(session, "mallory", "job-old", 1_000) == (0, 1_000)
    job_id = _paid(staked, mallory)
    credit = staked.checks.of_job(job_id).operator_credit  # type: ignore[union-attr]
    with staked.db.transaction() as session:
        owed = operator_debt(session, OperatorId("mallory"))
    assert owed == max(0, 1_000 - credit) and _posted(staked, "mallory") == max(0, credit - 1_000)
