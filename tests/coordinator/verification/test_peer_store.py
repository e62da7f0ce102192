"""The one-statement reads planting relies on give what the reads they replace give.

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


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_held_credits, _fees, st.integers(-1, 101))
def test_checker_stake_is_the_three_reads_it_replaces(engine: Engine, credits, fees, since_ms: int) -> None:  # type: ignore[no-untyped-def]
    with Session(engine) as session, session.begin():
        _fill(session, credits, fees)
        for node_id in (*NODES, "node-absent"):
            held, _ = store.node_exposure(session, node_id, since_ms)
            separate = (peer_store.fees_paid_since(session, node_id, since_ms), held,
                        store.posted_credit_since(session, node_id, since_ms))
            combined = peer_store.checker_stake(session, node_id, since_ms)
            assert combined == separate
            assert all(type(part) is int for part in combined)
