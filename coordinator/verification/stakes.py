"""A failed check takes the node's stake, in the caller's transaction (economics.py says why).

- stake_share of the node's other held credits is voided (whole credits, newest first), the
  consumers refunded as for a failed job; those checks become `forfeited`, nothing left to
  decide, except sampled ones still being checked (here or by a peer): their check still runs,
  for trust and re-runs;
- clawback_share of what was posted to the node for jobs within the claw-back horizon is taken
  back from its operator's balance, the rest left as a debt its next credits repay.
A checker caught by a planted check (planted.py) loses the same, and its fees of that horizon.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from coordinator.money import job_money
from coordinator.verification import store
from coordinator.verification.economics import StakePolicy, choose_forfeits, clawback, forfeit
from coordinator.verification.store import CheckRecord, CheckStatus, CreditState

log = logging.getLogger(__name__)

_FORFEITABLE = frozenset({CheckStatus.UNCHECKED, CheckStatus.WAITING, CheckStatus.PEER,
                          CheckStatus.QUARANTINED, CheckStatus.AWAITING_CHECKER})
_STILL_CHECKED = frozenset({CheckStatus.WAITING, CheckStatus.PEER})  # their verdict still moves trust


FORFEITED = "forfeited as stake:"


@dataclass(frozen=True)
class StakeTaken:
    forfeited_job_ids: tuple[str, ...]
    forfeited: int  # base units of held credits voided
    clawed_back: int  # base units taken from the operator's balance
    owed: int  # base units left as the operator's debt


def take_stake(session: Session, failed: CheckRecord, policy: StakePolicy, now_ms: int) -> StakeTaken:
    why = (f"node {failed.node_id} failed the check of job {failed.job_id} "
           f"({policy.stake_share:.0%} of its held credits are voided)")
    return _take(session, failed.node_id, failed.operator_id, failed.job_id, why, 0, policy, now_ms)


def take_checker_stake(session: Session, node_id: str, operator_id: str, planted_job_id: str,
                       fees_in_horizon: int, policy: StakePolicy, now_ms: int) -> StakeTaken:
    """A checker caught answering "matches" to a planted check: the same stake as a failed job, and
    every fee paid for its checks within the claw-back horizon taken back (economics.py)."""
    why = (f"checker {node_id} passed planted claim {planted_job_id}, built to fail any honest replay "
           f"({policy.stake_share:.0%} of its held credits are voided, its check fees taken back)")
    return _take(session, node_id, operator_id, planted_job_id, why, fees_in_horizon, policy, now_ms)


def _take(session: Session, node_id: str, operator_id: str, cause_job_id: str, why: str, extra_clawback: int,
          policy: StakePolicy, now_ms: int) -> StakeTaken:
    held = [c for c in store.held_checks(session, node_id, cause_job_id) if c.status in _FORFEITABLE]
    target = forfeit(sum(c.operator_credit for c in held), policy)
    chosen = choose_forfeits([(c.job_id, c.operator_credit) for c in held], target)
    voided = 0
    by_id = {c.job_id: c for c in held}
    for job_id in chosen:
        check = by_id[job_id]
        payment = job_money.reject_credit(session, job_id)
        assert payment.ok, f"ledger refused to void the held credit of {job_id}: {payment.failure}"
        # A waiting check still runs (its verdict moves trust and re-runs the job); the rest end here.
        status = check.status if check.status in _STILL_CHECKED else CheckStatus.FORFEITED
        moved = store.update_check(
            session, job_id, frozenset({check.status}), status=status,
            credit_state=CreditState.VOIDED, credit_resolved_at_ms=now_ms,
            reason=f"{FORFEITED} {why}; the consumer was refunded")
        assert moved, "the check was read held in this transaction"
        voided += check.operator_credit
    posted = store.posted_credit_since(session, node_id, now_ms - policy.clawback_horizon_s * 1000)
    taken, owed = job_money.claw_back(session, operator_id, cause_job_id,
                                      clawback(posted, policy) + extra_clawback)
    log.warning("node %s lost its stake (%s): %d held credits voided (%d base units), %d clawed back, "
                "%d owed", node_id, why, len(chosen), voided, taken, owed)
    return StakeTaken(tuple(chosen), voided, taken, owed)
