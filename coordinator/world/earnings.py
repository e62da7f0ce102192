"""An operator's money, pure: what each job paid and why not, each epoch's earnings, payout proofs.

Inputs are the ledger's own records (ledger.model.Transfer, epoch and payout
records), so what MLX World shows is what the ledger holds, transfer by transfer:
the numbers an operator sees are the ones they can recompute from the journal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ledger.api import (
    JobStep,
    PayoutLeaf,
    Transfer,
    TransferKind,
    TransferState,
    format_mlx,
    job_transfer_id,
    leaf_hash,
)

# The leaf and pair rules of ledger/merkle.py, named so the browser can check any proof.
LEAF_ENCODING = "keccak256(keccak256(abi.encode(uint256 epoch, address account, uint256 amount)))"
PAIR_RULE = "keccak256(min(a, b) ++ max(a, b))"


class PayState(StrEnum):
    PAID = "paid"  # the operator's credit is posted: spendable, and swept at the next epoch
    HELD = "held"  # credited but held pending until the job's check passes or its window closes
    REJECTED = "rejected"  # the held credit was voided: the check failed
    EXPIRED = "expired"  # the held credit expired unresolved
    UNPAID = "unpaid"  # no credit was ever made for the job


@dataclass(frozen=True)
class CheckFacts:
    """A job's proof check as coordinator.verification recorded it."""

    status: str  # waiting / passed / failed / unchecked / quarantined / awaiting_checker / forfeited
    sampled: bool
    reason: str | None  # why unchecked, or why it failed
    hold_until_ms: int  # the check window closes
    checked_at_ms: int | None


@dataclass(frozen=True)
class JobPay:
    state: PayState
    amount: int  # base units credited (posted, held, or voided)
    reason: str  # why it was not paid, or how it was paid


def job_pay(job_id: str, job_status: str, job_error: str | None, receipt_verified: bool,
            transfers: Sequence[Transfer], operator_account: str, check: CheckFacts | None = None) -> JobPay:
    """The operator's pay for one job, from the job's transfers in chain order (and its check, if any)."""
    credit_id = job_transfer_id(job_id, JobStep.CREDIT)
    credit = next((t for t in transfers if t.id == credit_id and t.credit_account == operator_account),
                  None)
    if credit is None:
        return JobPay(PayState.UNPAID, 0, _unpaid_reason(job_status, job_error, receipt_verified))
    if credit.state is TransferState.POSTED:
        return JobPay(PayState.PAID, credit.amount, "credited when the receipt verified")
    resolution = next((t for t in transfers if t.pending_id == credit.id), None)
    if resolution is None:
        return JobPay(PayState.HELD, credit.amount, _held_reason(check))
    if resolution.state is TransferState.POSTED:
        passed = check is not None and check.status == "passed"
        if passed:
            return JobPay(PayState.PAID, resolution.amount, "released: the job passed its replay check")
        if check is not None and check.reason and "no checker" in check.reason:
            return JobPay(PayState.PAID, resolution.amount, f"released after the longer hold: {check.reason}")
        return JobPay(PayState.PAID, resolution.amount, "released when the check window closed")
    if resolution.state is TransferState.VOIDED and check is not None and "forfeited as stake" in (check.reason or ""):
        return JobPay(PayState.REJECTED, credit.amount, f"not paid: {check.reason}")
    if resolution.state is TransferState.VOIDED:
        detail = (check.reason if check is not None and check.reason else job_error) or ""
        return JobPay(PayState.REJECTED, credit.amount, "not paid: the job failed its proof check"
                      + (f" ({detail})" if detail else "") + "; the consumer was refunded")
    return JobPay(PayState.EXPIRED, credit.amount, "not paid: the held credit expired unresolved")


def _held_reason(check: CheckFacts | None) -> str:
    why = f" ({check.reason})" if check is not None and check.reason else ""
    if check is not None and check.status == "waiting":
        return "held: sampled for a replay check; paid when it passes"
    if check is not None and check.status == "unchecked":
        return f"held until its check window closes{why}; then paid"
    if check is not None and check.status == "quarantined":
        return f"held: its replay check gave no verdict{why}; not paid until another checker decides"
    if check is not None and check.status == "awaiting_checker":
        return f"held: sampled, waiting for a checker that holds its weights{why}"
    return "held until the job's proof check passes or its check window closes"


def _unpaid_reason(job_status: str, job_error: str | None, receipt_verified: bool) -> str:
    if job_status == "failed":
        return f"not paid: the job failed ({job_error or 'no reason recorded'})"
    if job_status != "completed":
        return f"not paid yet: the job is {job_status}"
    if not receipt_verified:
        return "not paid: the node's receipt did not verify"
    return "not paid: the job was priced at zero"


@dataclass(frozen=True)
class EpochEarnings:
    jobs: int = 0  # job credits posted to the operator in the window
    seat_reward: int = 0  # Ultra-seat availability reward (from the bonus pool)
    seat_bonus: int = 0  # Ultra-seat bonus on job credits (from the bonus pool)
    held: int = 0  # job credits held pending at the window's end
    rejected: int = 0  # held credits voided or expired
    paid_out: int = 0  # swept to the on-chain payout at the epoch's close
    other_debits: int = 0  # corrections and withdrawals

    @property
    def earned(self) -> int:
        return self.jobs + self.seat_reward + self.seat_bonus


def epoch_earnings(transfers: Iterable[Transfer], operator_account: str) -> EpochEarnings:
    """Sum one window's transfers touching the operator's account, by what they were for.

    A credit held in the window and resolved in it too shows once, as its resolution; one
    still pending at the window's end shows as held.
    """
    window = list(transfers)
    resolved = {t.pending_id for t in window if t.pending_id is not None}
    totals = dict.fromkeys(("jobs", "seat_reward", "seat_bonus", "held", "rejected", "paid_out",
                            "other_debits"), 0)
    for transfer in window:
        if transfer.state is TransferState.PENDING and transfer.id in resolved:
            continue
        if transfer.credit_account == operator_account:
            totals[_credit_bucket(transfer)] += transfer.amount
        elif transfer.debit_account == operator_account and transfer.state is TransferState.POSTED:
            paid_out = transfer.kind is TransferKind.EPOCH_PAYOUT
            totals["paid_out" if paid_out else "other_debits"] += transfer.amount
    return EpochEarnings(**totals)


def _credit_bucket(transfer: Transfer) -> str:
    if transfer.state is TransferState.PENDING:
        return "held"
    if transfer.state in (TransferState.VOIDED, TransferState.EXPIRED):
        return "rejected"
    if transfer.kind is TransferKind.SEAT_REWARD:
        return "seat_reward"
    if transfer.kind is TransferKind.SEAT_JOB_BONUS:
        return "seat_bonus"
    return "jobs"


def money(amount: int) -> dict[str, str]:
    """An amount for JSON: exact base units as text (JavaScript numbers stop at 2**53) and MLX."""
    return {"base_units": str(amount), "mlx": format_mlx(amount)}


def earnings_json(earnings: EpochEarnings) -> dict[str, object]:
    return {name: money(getattr(earnings, name))
            for name in ("jobs", "seat_reward", "seat_bonus", "earned", "held", "rejected",
                         "paid_out", "other_debits")}


@dataclass(frozen=True)
class ChainRoot:
    """The root a proof is checked against, and where it was read."""

    root: str  # 0x-hex
    source: str  # "chain": read from the distributor now; "anchor": recorded when published; "ledger"
    chain_id: int | None = None
    distributor: str | None = None
    tx_hash: str | None = None
    block_number: int | None = None


@dataclass(frozen=True)
class ChainRead:
    """What the chain said about an epoch's root just now (all None: no chain to ask)."""

    root: str | None  # 0x-hex; None: not on chain (or not asked)
    chain_id: int | None
    distributor: str | None
    unreachable: bool = False


def chain_check(read: ChainRead, ledger_root: str) -> str:
    """How the chain's root compares with the ledger's: matches, differs, not_on_chain, unreachable,
    or no_chain (nothing to ask: the page can show only what the coordinator recorded)."""
    if read.unreachable:
        return "unreachable"
    if read.chain_id is None:
        return "no_chain"
    if read.root is None:
        return "not_on_chain"
    return "matches" if read.root == ledger_root else "differs"


def chain_check_json(read: ChainRead, ledger_root: str) -> dict[str, object]:
    return {"check": chain_check(read, ledger_root), "root": read.root, "chain_id": read.chain_id,
            "distributor": read.distributor}


def proof_json(leaf: PayoutLeaf, proof: Sequence[bytes], root: ChainRoot) -> dict[str, object]:
    """Everything a browser needs to recompute the leaf and fold the proof up to the root."""
    return {
        "epoch": leaf.epoch,
        "address": leaf.address,
        "amount": money(leaf.amount),
        "hash": "keccak256",
        "leaf_encoding": LEAF_ENCODING,
        "pair_rule": PAIR_RULE,
        "leaf": "0x" + leaf_hash(leaf).hex(),
        "proof": ["0x" + sibling.hex() for sibling in proof],
        "root": root.root,
        "root_source": root.source,
        "chain_id": root.chain_id,
        "distributor": root.distributor,
        "tx_hash": root.tx_hash,
        "block_number": root.block_number,
    }
