"""Reads for an operator's own page: their Macs, their jobs with pay, earnings per epoch, proofs.

Every function takes the operator id of an authenticated operator key and reads
only what belongs to it; nothing here can be asked about another operator.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from coordinator.storage.tables import job_assignments, jobs, nodes
from coordinator.world.earnings import (
    ChainRoot,
    JobPay,
    earnings_json,
    epoch_earnings,
    job_pay,
    money,
)
from coordinator.world.job_lookup import check_of
from coordinator.world.queries import Liveness, display_names, node_rows
from ledger import api as ledger
from ledger.api import EpochRecord, PayoutLeaf

OPERATOR_NODES_MAX = 1_000
JOBS_PAGE_SIZE_MAX = 100
EPOCHS_SHOWN_MAX = 12
TRANSFERS_PER_WINDOW_MAX = 50_000
ANCHORS_SHOWN_MAX = 16


def operator_node_ids(session: Session, operator_id: str) -> list[str]:
    return list(session.execute(select(nodes.c.node_id).where(nodes.c.operator_id == operator_id)
                                .order_by(nodes.c.node_id).limit(OPERATOR_NODES_MAX)).scalars())


def summary_json(session: Session, operator_id: str, live: Liveness) -> dict[str, object]:
    """The operator's Macs (public rows plus nothing secret) and their balance."""
    node_ids = operator_node_ids(session, operator_id)
    rows = node_rows(session, node_ids, live)
    balance = ledger.balance(session, ledger.operator_account_id(operator_id))  # type: ignore[arg-type]
    return {
        "operator_id": operator_id,
        "nodes": [rows[node_id] for node_id in node_ids if node_id in rows],
        "balance": {
            "available": money(0 if balance is None else balance.available),
            "held": money(0 if balance is None else balance.credits_pending),
            "earned_all_time": money(0 if balance is None else balance.credits_posted),
        },
        "payout_address": ledger.payout_address(session, operator_id),
    }


def _job_ids_of_operator(operator_id: str):  # type: ignore[no-untyped-def]
    placed = job_assignments.join(nodes, nodes.c.node_id == job_assignments.c.node_id)
    return (select(job_assignments.c.job_id).select_from(placed)
            .where(nodes.c.operator_id == operator_id))


def jobs_json(session: Session, operator_id: str, page: int, page_size: int) -> dict[str, object]:
    """The jobs placed on the operator's Macs, newest first, with what each paid and why not."""
    assert 1 <= page and 1 <= page_size <= JOBS_PAGE_SIZE_MAX
    mine = jobs.c.job_id.in_(_job_ids_of_operator(operator_id))
    total = session.execute(select(func.count()).select_from(jobs).where(mine)).scalar_one()
    rows = session.execute(select(
        jobs.c.job_id, jobs.c.model_id, jobs.c.status, jobs.c.error, jobs.c.receipt_verified,
        jobs.c.prompt_tokens, jobs.c.completion_tokens, jobs.c.created_at_ms, jobs.c.finished_at_ms,
        jobs.c.attempt).where(mine).order_by(jobs.c.created_at_ms.desc(), jobs.c.job_id)
        .limit(page_size).offset((page - 1) * page_size)).all()
    placed = _placed_nodes(session, [(row.job_id, row.attempt) for row in rows], operator_id)
    account = ledger.operator_account_id(operator_id)  # type: ignore[arg-type]
    items = []
    for row in rows:
        check = check_of(session, row.job_id)
        pay: JobPay = job_pay(row.job_id, row.status, row.error, row.receipt_verified,
                              ledger.transfers_for_job(session, row.job_id), account, check)
        items.append({
            "job_id": row.job_id, "model_id": row.model_id, "status": row.status,
            "error": row.error, "receipt_verified": row.receipt_verified,
            "prompt_tokens": row.prompt_tokens, "completion_tokens": row.completion_tokens,
            "created_at_ms": row.created_at_ms, "finished_at_ms": row.finished_at_ms,
            "nodes": placed.get(row.job_id, []),
            "pay_state": pay.state.value, "pay": money(pay.amount), "pay_reason": pay.reason,
            "check": None if check is None else {"status": check.status, "reason": check.reason,
                                                 "hold_until_ms": check.hold_until_ms,
                                                 "checked_at_ms": check.checked_at_ms},
        })
    return {"page": page, "page_size": page_size, "total": total,
            "pages": max(1, -(-total // page_size)), "jobs": items}


def _placed_nodes(session: Session, job_attempts: list[tuple[str, int]],
                  operator_id: str) -> dict[str, list[dict[str, str]]]:
    if not job_attempts:
        return {}
    wanted = {job_id for job_id, _ in job_attempts}
    attempt_of = dict(job_attempts)
    rows = session.execute(select(job_assignments.c.job_id, job_assignments.c.node_id,
                                  job_assignments.c.attempt)
                           .select_from(job_assignments.join(nodes, nodes.c.node_id == job_assignments.c.node_id))
                           .where(and_(job_assignments.c.job_id.in_(sorted(wanted)),
                                       nodes.c.operator_id == operator_id))).all()
    names = display_names(session, [row.node_id for row in rows])
    placed: dict[str, list[dict[str, str]]] = {}
    for job_id, node_id, attempt in rows:
        if attempt == attempt_of[job_id]:
            placed.setdefault(job_id, []).append({"node_id": node_id, "name": names[node_id][0]})
    return placed


def _epoch_json(session: Session, operator_id: str, epoch: EpochRecord | None, after_us: int,
                until_us: int) -> dict[str, object]:
    account = ledger.operator_account_id(operator_id)  # type: ignore[arg-type]
    transfers = ledger.transfers_in_window(session, account, after_us, until_us,
                                                TRANSFERS_PER_WINDOW_MAX)
    earnings = epoch_earnings(transfers, account)
    payload: dict[str, object] = {
        "epoch": None if epoch is None else epoch.number,
        "closed": epoch is not None,
        "window_start_us": after_us, "window_end_us": until_us,
        "transfers_truncated": len(transfers) == TRANSFERS_PER_WINDOW_MAX,
        "earnings": earnings_json(earnings),
    }
    if epoch is None:
        return payload
    seats = ledger.seat_outcomes(session, epoch.number, operator_id)
    payouts = [p for p in ledger.epoch_payouts(session, epoch.number) if p.operator_id == operator_id]
    payload.update({
        "nominal_start_us": epoch.start_us, "nominal_end_us": epoch.end_us,
        "root": epoch.root, "policy_version": epoch.policy_version,
        "seats": [{"node_id": s.node_id, "availability_bps": s.availability_bps,
                   "qualified": s.qualified, "reason": s.reason,
                   "availability_reward": money(s.availability_reward),
                   "job_bonus": money(s.job_bonus), "bonus_job_count": s.bonus_job_count}
                  for s in seats],
        "payout": None if not payouts else {"address": payouts[0].address,
                                            "amount": money(payouts[0].amount),
                                            "transfer_id": payouts[0].transfer_id},
        "anchors": [_root_json(root) for root in anchored_roots(session, epoch.number)],
    })
    return payload


def epochs_json(session: Session, operator_id: str, now_us: int, before: int | None) -> dict[str, object]:
    """Earnings per epoch, newest first: the open window (on the first page), then closed epochs."""
    items: list[dict[str, object]] = []
    newest = (ledger.last_epoch(session) if before is None
              else ledger.previous_epoch(session, before))
    if before is None:
        open_since = 0 if newest is None else newest.cutoff_us
        items.append(_epoch_json(session, operator_id, None, open_since, now_us))
    epoch = newest
    while epoch is not None and len(items) < EPOCHS_SHOWN_MAX + 1:
        previous = ledger.previous_epoch(session, epoch.number)
        items.append(_epoch_json(session, operator_id, epoch, 0 if previous is None else previous.cutoff_us,
                                 epoch.cutoff_us))
        epoch = previous
    oldest_shown = next((item["epoch"] for item in reversed(items) if item["epoch"] is not None), None)
    return {"epochs": items, "older_before": oldest_shown if epoch is not None else None}


def payout_leaf(session: Session, operator_id: str, number: int) -> PayoutLeaf | None:
    """The epoch's leaf paying this operator's address (shared addresses are paid in one leaf)."""
    recorded = ledger.epoch_payouts(session, number)
    mine = next((p for p in recorded if p.operator_id == operator_id), None)
    if mine is None:
        return None
    amount = sum(p.amount for p in recorded if p.address == mine.address)
    return PayoutLeaf(number, mine.address, amount)


def anchored_roots(session: Session, number: int) -> list[ChainRoot]:
    """Where the epoch's root was published on chain, as recorded when it was published."""
    return [ChainRoot(anchor.root, "anchor", anchor.chain_id, anchor.distributor, anchor.tx_hash,
                      anchor.block_number) for anchor in ledger.anchors_of_epoch(session, number, ANCHORS_SHOWN_MAX)]


def _root_json(root: ChainRoot) -> dict[str, object]:
    return {"root": root.root, "chain_id": root.chain_id, "distributor": root.distributor,
            "tx_hash": root.tx_hash, "block_number": root.block_number}


@dataclass(frozen=True)
class ProofInputs:
    leaf: PayoutLeaf
    epoch: EpochRecord
    anchors: tuple[ChainRoot, ...]
