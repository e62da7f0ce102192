"""The ledger's vocabulary: frozen records, requests and result codes.

Shared by the pure posting rules (ledger.rules) and the SQL shell (ledger.storage.store);
no SQLAlchemy row ever leaves the shell, only these records.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ledger.units import AMOUNT_MAX

ID_LENGTH_MAX = 128  # account, transfer, pending and job ids
POLICY_VERSION_LENGTH_MAX = 32
TIMEOUT_S_MAX = 30 * 24 * 3600  # a reservation may stay pending at most 30 days
BATCH_SIZE_MAX = 64  # operations in one linked chain, applied all-or-nothing
OPERATIONS_PER_CALL_MAX = 8_190  # operations in one call, over all its chains (TigerBeetle's batch)
MICROSECONDS_PER_SECOND = 1_000_000


class TransferState(StrEnum):
    """A transfer's own phase; a pending row never changes, its resolution is a new transfer."""

    PENDING = "pending"
    POSTED = "posted"
    VOIDED = "voided"
    EXPIRED = "expired"


class AccountKind(StrEnum):
    OPERATOR = "operator"
    CONSUMER = "consumer"
    TREASURY = "treasury"
    ISSUANCE = "issuance"
    ESCROW = "escrow"
    EXTERNAL = "external"
    POOL = "pool"  # the bonus pool that pays Ultra-seat rewards and bonuses
    PAYOUT = "payout"  # epoch payouts owed on chain, claimed by operators with a proof
    DEBT = "debt"  # what an operator owes after a claw-back its balance could not cover (negative)


class TransferKind(StrEnum):
    DEPOSIT = "deposit"
    WITHDRAWAL = "withdrawal"
    CORRECTION = "correction"
    JOB_RESERVE = "job_reserve"
    JOB_CHARGE = "job_charge"
    JOB_RELEASE = "job_release"
    JOB_OPERATOR_CREDIT = "job_operator_credit"
    JOB_NETWORK_FEE = "job_network_fee"
    JOB_REFUND = "job_refund"  # a failed check gives the consumer's charge back
    BONUS_FUNDING = "bonus_funding"  # issuance -> bonus pool, what an epoch's seat bonuses need
    SEAT_REWARD = "seat_reward"  # bonus pool -> operator: availability reward per seat-hour
    SEAT_JOB_BONUS = "seat_job_bonus"  # bonus pool -> operator: the Ultra-seat multiplier on job credits
    EPOCH_PAYOUT = "epoch_payout"  # operator -> on-chain payouts at an epoch's close
    CLAWBACK = "clawback"  # operator (or its debt) -> treasury: credits taken back after a failed check
    DEBT_REPAYMENT = "debt_repayment"  # operator -> its debt account, from credits posted later
    CHECK_FEE = "check_fee"  # the network -> a peer's operator, for replaying another node's job


class ResultCode(StrEnum):
    CREATED = "created"
    EXISTS = "exists"
    EXISTS_WITH_DIFFERENT_FIELDS = "exists_with_different_fields"
    INVALID_ID = "invalid_id"
    INVALID_AMOUNT = "invalid_amount"
    INVALID_TIMEOUT = "invalid_timeout"
    INVALID_FIELD = "invalid_field"  # job_id or policy_version malformed or too long
    ACCOUNTS_MUST_DIFFER = "accounts_must_differ"
    DEBIT_ACCOUNT_NOT_FOUND = "debit_account_not_found"
    CREDIT_ACCOUNT_NOT_FOUND = "credit_account_not_found"
    EXCEEDS_CREDITS = "exceeds_credits"
    OVERFLOWS_DEBITS = "overflows_debits"
    OVERFLOWS_CREDITS = "overflows_credits"
    PENDING_ID_MUST_DIFFER = "pending_id_must_differ"
    PENDING_TRANSFER_NOT_FOUND = "pending_transfer_not_found"
    PENDING_TRANSFER_NOT_PENDING = "pending_transfer_not_pending"
    PENDING_TRANSFER_HAS_DIFFERENT_DEBIT_ACCOUNT = "pending_transfer_has_different_debit_account"
    PENDING_TRANSFER_HAS_DIFFERENT_CREDIT_ACCOUNT = "pending_transfer_has_different_credit_account"
    PENDING_ALREADY_RESOLVED = "pending_already_resolved"
    PENDING_TRANSFER_EXPIRED = "pending_transfer_expired"
    PENDING_TRANSFER_NOT_EXPIRED = "pending_transfer_not_expired"
    PENDING_TRANSFER_HAS_NO_TIMEOUT = "pending_transfer_has_no_timeout"
    EXCEEDS_PENDING_AMOUNT = "exceeds_pending_amount"
    EPOCH_CLOSED = "epoch_closed"  # the transfer's time falls in an epoch already closed
    LINKED_EVENT_FAILED = "linked_event_failed"  # another operation in the same batch failed


OK_CODES = frozenset({ResultCode.CREATED, ResultCode.EXISTS})
# Bound once for the per-row paths: EnumType defines __getattr__, so each `TransferState.PENDING`
# written in a function is a slow class lookup (about 0.1 us).
_PENDING = TransferState.PENDING
_CREATED, _EXISTS = ResultCode.CREATED, ResultCode.EXISTS


@dataclass(frozen=True)
class BalanceChange:
    """Signed changes to the four balance fields of one account."""

    debits_pending: int = 0
    debits_posted: int = 0
    credits_pending: int = 0
    credits_posted: int = 0


@dataclass(frozen=True)
class Balance:
    debits_pending: int = 0
    debits_posted: int = 0
    credits_pending: int = 0
    credits_posted: int = 0

    def __post_init__(self) -> None:
        for amount in (self.debits_pending, self.debits_posted, self.credits_pending, self.credits_posted):
            assert type(amount) is int and 0 <= amount <= AMOUNT_MAX, f"balance field out of range: {amount}"

    @property
    def available(self) -> int:
        """What the account can still be debited: posted credits less posted and promised debits."""
        return self.credits_posted - self.debits_posted - self.debits_pending

    @property
    def net_posted(self) -> int:
        """Posted credits less posted debits (negative for the issuance and external accounts)."""
        return self.credits_posted - self.debits_posted

    def plus(self, change: BalanceChange) -> Balance:
        return Balance(
            debits_pending=self.debits_pending + change.debits_pending,
            debits_posted=self.debits_posted + change.debits_posted,
            credits_pending=self.credits_pending + change.credits_pending,
            credits_posted=self.credits_posted + change.credits_posted,
        )

    def minus(self, other: Balance) -> BalanceChange:
        return BalanceChange(
            debits_pending=self.debits_pending - other.debits_pending,
            debits_posted=self.debits_posted - other.debits_posted,
            credits_pending=self.credits_pending - other.credits_pending,
            credits_posted=self.credits_posted - other.credits_posted,
        )


@dataclass(frozen=True)
class Account:
    id: str
    kind: AccountKind
    debits_must_not_exceed_credits: bool  # no overdraft: prepaid consumers, operators, escrow
    created_at_us: int
    balance: Balance


@dataclass(frozen=True)
class Transfer:
    """One immutable row of the ledger, with its link in the hash chain."""

    sequence: int  # position in the chain, from 1
    id: str
    debit_account: str
    credit_account: str
    amount: int  # base units; for a post the posted amount, for void/expire the released one
    state: TransferState
    pending_id: str | None  # set on post/void/expire: the pending transfer resolved
    timeout_s: int  # pending only; 0 means it never expires by itself
    job_id: str | None
    kind: TransferKind
    policy_version: str | None
    created_at_us: int
    prev_hash: str
    hash: str

    # Written out because the generated frozen __init__ sets each field through
    # object.__setattr__ (about 3 us here); the ledger builds one per row it reads or writes.
    def __init__(self, sequence: int, id: str, debit_account: str, credit_account: str, amount: int,
                 state: TransferState, pending_id: str | None, timeout_s: int, job_id: str | None,
                 kind: TransferKind, policy_version: str | None, created_at_us: int, prev_hash: str,
                 hash: str) -> None:
        object.__setattr__(self, "__dict__", {
            "sequence": sequence, "id": id, "debit_account": debit_account, "credit_account": credit_account,
            "amount": amount, "state": state, "pending_id": pending_id, "timeout_s": timeout_s, "job_id": job_id,
            "kind": kind, "policy_version": policy_version, "created_at_us": created_at_us,
            "prev_hash": prev_hash, "hash": hash,
        })

    @property
    def expires_at_us(self) -> int | None:
        if self.state is not _PENDING or self.timeout_s == 0:
            return None
        return self.created_at_us + self.timeout_s * MICROSECONDS_PER_SECOND


@dataclass(frozen=True, kw_only=True)
class TransferRequest:
    """Move amount from debit_account to credit_account now, or reserve it (pending=True)."""

    id: str
    debit_account: str
    credit_account: str
    amount: int
    kind: TransferKind
    job_id: str | None = None
    policy_version: str | None = None
    pending: bool = False
    timeout_s: int = 0  # pending only

    # The generated frozen __init__ sets each field through object.__setattr__ (about 2.5 us
    # here); every job payment builds several of these.
    def __init__(self, *, id: str, debit_account: str, credit_account: str, amount: int, kind: TransferKind,
                 job_id: str | None = None, policy_version: str | None = None, pending: bool = False,
                 timeout_s: int = 0) -> None:
        object.__setattr__(self, "__dict__", {
            "id": id, "debit_account": debit_account, "credit_account": credit_account, "amount": amount,
            "kind": kind, "job_id": job_id, "policy_version": policy_version, "pending": pending,
            "timeout_s": timeout_s,
        })


@dataclass(frozen=True, kw_only=True)
class PostPending:
    """Post a pending transfer for amount (default: all of it); the rest is released."""

    id: str
    pending_id: str
    amount: int | None = None
    kind: TransferKind | None = None  # default: the pending transfer's kind
    policy_version: str | None = None  # default: the pending transfer's
    debit_account: str | None = None  # if given, must match the pending transfer's
    credit_account: str | None = None

    # Written out like TransferRequest's.
    def __init__(self, *, id: str, pending_id: str, amount: int | None = None, kind: TransferKind | None = None,
                 policy_version: str | None = None, debit_account: str | None = None,
                 credit_account: str | None = None) -> None:
        object.__setattr__(self, "__dict__", {
            "id": id, "pending_id": pending_id, "amount": amount, "kind": kind, "policy_version": policy_version,
            "debit_account": debit_account, "credit_account": credit_account,
        })


@dataclass(frozen=True, kw_only=True)
class VoidPending:
    id: str
    pending_id: str
    kind: TransferKind | None = None
    debit_account: str | None = None
    credit_account: str | None = None

    # Written out like TransferRequest's.
    def __init__(self, *, id: str, pending_id: str, kind: TransferKind | None = None,
                 debit_account: str | None = None, credit_account: str | None = None) -> None:
        object.__setattr__(self, "__dict__", {
            "id": id, "pending_id": pending_id, "kind": kind, "debit_account": debit_account,
            "credit_account": credit_account,
        })


@dataclass(frozen=True, kw_only=True)
class ExpirePending:
    """Release a pending transfer whose timeout has passed."""

    id: str
    pending_id: str
    kind: TransferKind | None = None


Operation = TransferRequest | PostPending | VoidPending | ExpirePending
Resolution = PostPending | VoidPending | ExpirePending


@dataclass(frozen=True)
class TransferResult:
    id: str
    code: ResultCode
    transfer: Transfer | None = None  # the stored transfer for created/exists/exists_with_different_fields

    # Written out like Transfer's: a call answers one of these per operation.
    def __init__(self, id: str, code: ResultCode, transfer: Transfer | None = None) -> None:
        object.__setattr__(self, "__dict__", {"id": id, "code": code, "transfer": transfer})

    @property
    def ok(self) -> bool:
        return self.code is _CREATED or self.code is _EXISTS  # OK_CODES, by identity: read once a result


@dataclass(frozen=True)
class ChainHead:
    last_sequence: int
    last_transfer_id: str | None
    last_hash: str


@dataclass(frozen=True)
class ChainCheck:
    ok: bool
    first_bad_transfer_id: str | None
    transfers_checked: int
    reason: str = ""


@dataclass(frozen=True)
class BalanceCheck:
    ok: bool
    mismatched_account_ids: tuple[str, ...]
