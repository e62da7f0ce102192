"""The one-statement reads of a node's stake (planting, and every receipt) give what the reads they
replace give, and what their definitions say.

Only the two verification tables, created bare (no foreign keys to fill), on SQLite and on
PostgreSQL when it is reachable; hypothesis fills them with rows of every state.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, delete
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from coordinator.verification import peer_store, store
from coordinator.verification.peer_store import PeerCheckRecord, PeerCheckStatus, peer_checks
from coordinator.verification.peers import Role
from coordinator.verification.store import CheckRecord, CheckStatus, CreditState, job_checks
from tests.conftest import fresh_postgres_database

NODES = ("node-a", "node-b")
CREDIT_MAX = 10**15  # base units: sums beyond 32 bits must stay exact integers


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    if request.param == "sqlite":
        engine = create_engine("sqlite://")
        store.metadata.create_all(engine, tables=[job_checks, peer_checks])
        yield engine
        engine.dispose()
        return
    with fresh_postgres_database() as url:
        engine = create_engine(url)
        store.metadata.create_all(engine, tables=[job_checks, peer_checks])
        yield engine
        engine.dispose()


_held_credits = st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(list(CreditState)),
                                   st.integers(0, CREDIT_MAX), st.integers(0, 100)), max_size=8)
_fees = st.lists(st.tuples(st.sampled_from((*NODES, None)), st.booleans(), st.booleans(),
                           st.one_of(st.none(), st.integers(0, 100)), st.integers(0, CREDIT_MAX)), max_size=8)


def _fill(session: Session, credits, fees) -> None:  # type: ignore[no-untyped-def]
    session.execute(delete(job_checks))
    session.execute(delete(peer_checks))
    for n, (node_id, state, credit, completed_at_ms) in enumerate(credits):
        store.insert_check(session, CheckRecord(f"job-{n}", node_id, "op", CheckStatus.UNCHECKED, 0.5, False,
                                                credit, state, 0, completed_at_ms))
    for n, (checker, paid, taken_back, answered_at_ms, fee) in enumerate(fees):
        peer_store.insert_peer_check(session, PeerCheckRecord(
            f"pc-{n}", f"job-{n}", Role.CHECK, 1, "node-x", "op-x", PeerCheckStatus.ANSWERED, 0,
            checker_node_id=checker, answered_at_ms=answered_at_ms, fee_base_units=fee,
            fee_transfer_id=f"t-{n}" if paid else None, fee_taken_back_by="pc-planted" if taken_back else None))


def _expected(credits, fees, node_id: str, since_ms: int) -> tuple[int, int, int, int]:  # type: ignore[no-untyped-def]
    """(fees kept, held, posted since, jobs completed since) by their definitions, in Python."""
    fees_kept = sum(fee for checker, paid, taken_back, answered_at_ms, fee in fees
                    if checker == node_id and paid and not taken_back
                    and answered_at_ms is not None and answered_at_ms >= since_ms)
    mine = [(state, credit, at_ms) for node, state, credit, at_ms in credits if node == node_id]
    held = sum(credit for state, credit, _ in mine if state is CreditState.PENDING)
    posted = sum(credit for state, credit, at_ms in mine if state is CreditState.POSTED and at_ms >= since_ms)
    return fees_kept, held, posted, sum(1 for _, _, at_ms in mine if at_ms >= since_ms)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_held_credits, _fees, st.integers(-1, 101))
def test_checker_stake_and_node_exposure_read_what_their_definitions_say(engine: Engine, credits, fees,  # type: ignore[no-untyped-def]
                                                                        since_ms: int) -> None:
    with Session(engine) as session, session.begin():
        _fill(session, credits, fees)
        for node_id in (*NODES, "node-absent"):
            fees_kept, held, posted, recent = _expected(credits, fees, node_id, since_ms)
            separate = (peer_store.fees_paid_since(session, node_id, since_ms),
                        store.node_exposure(session, node_id, since_ms)[0],
                        store.posted_credit_since(session, node_id, since_ms))
            combined = peer_store.checker_stake(session, node_id, since_ms)
            assert combined == separate == (fees_kept, held, posted)
            assert store.node_exposure(session, node_id, since_ms) == (held, recent)
            assert all(type(part) is int for part in combined)
