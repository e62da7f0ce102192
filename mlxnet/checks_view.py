"""Proof-of-completion checks for people: why a job was (or was not) paid, and a node's record.

`mlxnet checks --job ID` or `--node ID` reads the coordinator's database directly, the
way an operator auditing their earnings would.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from coordinator.storage.database import Database, default_sqlite_url
from coordinator.verification import peer_store, store
from coordinator.verification.policy import TrustPolicy, check_rate, reputation
from coordinator.verification.store import CheckRecord, CheckStatus, CreditState

DATABASE_URL_ENV = "MLXNET_DATABASE_URL"
POLL_INTERVAL_S = 0.05
NODE_CHECKS_SHOWN_MAX = 50
UNDECIDED = frozenset({CheckStatus.WAITING, CheckStatus.PEER})


def wait_for_checks(database_url: str, job_ids: Sequence[str], timeout_s: float = 120.0,
                    waiting: frozenset[CheckStatus] = UNDECIDED) -> list[CheckRecord]:
    """The jobs' check records once none is in a `waiting` state (by default: for the verifier or a peer).

    Verdicts are written by the coordinator process, with no event another process
    can wait on, so this re-reads the database every POLL_INTERVAL_S until the deadline.
    """
    db = Database(database_url)
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    try:
        while True:
            with db.transaction() as session:
                checks = [store.check_by_job(session, job_id) for job_id in job_ids]
            if all(c is not None and c.status not in waiting for c in checks):
                return checks  # type: ignore[return-value]
            if time.monotonic() > deadline:
                raise TimeoutError(f"checks still waiting after {timeout_s:.0f}s: "
                                   f"{[c.job_id for c in checks if c is None or c.status in waiting]}")
            pause.wait(POLL_INTERVAL_S)
    finally:
        db.dispose()


def render_check(check: CheckRecord) -> str:
    credit = {CreditState.PENDING: "held", CreditState.POSTED: "posted",
              CreditState.VOIDED: "voided, the consumer refunded"}[check.credit_state]
    money = f"{check.operator_credit} base units {credit}"
    if check.status is CheckStatus.PASSED:
        return f"check passed (replayed by {check.verifier}); {money}"
    if check.status is CheckStatus.FAILED:
        rerun = f"; re-run as {check.rerun_job_id}" if check.rerun_job_id else ""
        return f"check FAILED: {check.reason}; {money}{rerun}"
    if check.status is CheckStatus.WAITING:
        return f"waiting for the verifier (check rate {check.check_rate:.2f}); {money}"
    if check.status is CheckStatus.PEER:
        return f"being checked by peers: {check.reason}; {money}"
    if check.status is CheckStatus.QUARANTINED:
        return f"quarantined, not retried: {check.reason}; {money}"
    return f"unchecked: {check.reason}; {money}"


def _show_job(db: Database, job_id: str) -> int:
    with db.transaction() as session:
        check = store.check_by_job(session, job_id)
    if check is None:
        with db.transaction() as session:
            planted = [row for row in peer_store.of_job(session, job_id) if row.planted]
        for row in planted:
            print(f"job {job_id} is a planted check, built from job {row.planted_from_job_id}, sent to "
                  f"{row.checker_node_id} ({row.status}): {row.reason}")
        if planted:
            return 0
        print(f"job {job_id} has no check: it has not completed with a receipt")
        return 1
    print(f"job {job_id} on node {check.node_id} (operator {check.operator_id})")
    print(f"  {render_check(check)}")
    if check.evidence_json:
        print("  evidence: " + json.dumps(json.loads(check.evidence_json), indent=2).replace("\n", "\n  "))
    with db.transaction() as session:
        peer_checks = peer_store.of_job(session, job_id)
    for row in peer_checks:
        found = {None: "", True: ", found it matched", False: ", found it differs"}[row.passed]
        fee = f"; paid {row.fee_base_units} base units" if row.fee_transfer_id else ""
        print(f"  {row.role} by {row.checker_node_id or 'no peer yet'} ({row.status}{found}{fee}): "
              f"{row.reason or ''}")
    return 0


def _show_node(db: Database, node_id: str) -> int:
    with db.transaction() as session:
        trust = store.node_trust_of(session, node_id)
        checks = store.checks_for_node(session, node_id, NODE_CHECKS_SHOWN_MAX)
        planted = peer_store.planted_answered_by(session, node_id, NODE_CHECKS_SHOWN_MAX)
    policy = TrustPolicy()
    record = trust.record
    print(f"node {node_id}: {record.checks_passed} checks passed, {record.checks_failed} failed; "
          f"reputation {reputation(record, policy):.3f}; next jobs checked at rate "
          f"{check_rate(record, policy):.3f} (default policy)")
    if trust.quarantined_at_ms is not None:
        print(f"  QUARANTINED: {trust.quarantine_reason}")
    if planted:
        caught = [row for row in planted if row.passed]
        print(f"  as a checker: {len(planted)} planted checks answered (claims built to fail), "
              f"{len(caught)} wrongly passed")
        for row in caught:
            print(f"  CAUGHT by planted check {row.check_id}: {row.reason}")
    for check in checks:
        print(f"  {check.job_id}: {render_check(check)}")
    return 0


def _checks(args: argparse.Namespace) -> int:
    url = args.database_url or os.environ.get(DATABASE_URL_ENV) or default_sqlite_url(args.data_dir)
    db = Database(url)
    try:
        return _show_job(db, args.job) if args.job else _show_node(db, args.node)
    finally:
        db.dispose()


def add_subcommands(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("checks", help="why a job was or was not paid; a node's record")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", help="a job id: its check, credit and evidence")
    which.add_argument("--node", help="a node id: its trust, quarantine and latest checks")
    parser.add_argument("--database-url", help=f"any SQLAlchemy URL (or ${DATABASE_URL_ENV}); "
                        "default: SQLite in --data-dir")
    parser.add_argument("--data-dir", type=Path, default=Path("~/.mlxnet/coordinator").expanduser())
    parser.set_defaults(handler=_checks)
