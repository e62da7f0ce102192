"""The job-payment flow the coordinator calls, idempotent through ids derived from the job.

The flow:
1. reserve_job: a pending transfer consumer -> escrow for the job's maximum charge.
2. settle_job: post the reservation for the actual charge (the rest returns to the
   consumer), then escrow -> operator for the operator's credit and escrow -> treasury
   for the network fee, all in one atomic batch.
   Or void_job / expire_job: release the whole reservation.
3. credit_operator_for_job: while a consumer has no prepaid account, the operator is
   paid from the issuance account instead. It uses the same transfer id as settle's
   operator credit, so one job can never pay its operator twice.

The slashable flow (proofs): complete_job charges the consumer for the tokens made and
holds the operator's credit PENDING for the check window; release_job_credit posts it
(check passed or window closed); reject_job_credit voids it and refunds the whole charge.
All three steps share the `credit` transfer id with settle_job and credit_operator_for_job.

Calling any step again answers `exists` for each transfer and moves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.ids import ConsumerId, JobId, OperatorId
from ledger.book import (
    JobStep,
    accounts_exist,
    create_transfer,
    create_transfers,
    ensure_account,
    get_transfer,
    job_transfer_id,
)
from ledger.model import (
    OK_CODES,
    TIMEOUT_S_MAX,
    AccountKind,
    ExpirePending,
    Operation,
    PostPending,
    ResultCode,
    TransferKind,
    TransferRequest,
    TransferResult,
    TransferState,
    VoidPending,
)
from ledger.policy import JobPrice
from ledger.rules import valid_id

CONSUMER_ESCROW_ACCOUNT = "escrow:consumers"
TREASURY_FEES_ACCOUNT = "treasury:fees"
ISSUANCE_REWARDS_ACCOUNT = "issuance:rewards"
EXTERNAL_DEPOSITS_ACCOUNT = "external:deposits"  # where consumers' prepaid tokens come from

# A held credit expires only this long after its check window, so a coordinator that was
# down when the window closed can still release it rather than find it expired.
CREDIT_HOLD_GRACE_S = 7 * 24 * 3600
CREDIT_HOLD_S_MAX = TIMEOUT_S_MAX - CREDIT_HOLD_GRACE_S

# The members a batch reads for every job, bound once: EnumType defines __getattr__, so each
# `JobStep.RESERVE` written in a function is a slow class lookup (about 0.1 us).
_RESERVE, _POST, _CREDIT, _FEE, _RELEASE = JobStep.RESERVE, JobStep.POST, JobStep.CREDIT, JobStep.FEE, JobStep.RELEASE
_JOB_RESERVE, _JOB_CHARGE = TransferKind.JOB_RESERVE, TransferKind.JOB_CHARGE
_JOB_OPERATOR_CREDIT, _JOB_NETWORK_FEE = TransferKind.JOB_OPERATOR_CREDIT, TransferKind.JOB_NETWORK_FEE

SYSTEM_ACCOUNTS = (
    (CONSUMER_ESCROW_ACCOUNT, AccountKind.ESCROW),
    (TREASURY_FEES_ACCOUNT, AccountKind.TREASURY),
    (ISSUANCE_REWARDS_ACCOUNT, AccountKind.ISSUANCE),
    (EXTERNAL_DEPOSITS_ACCOUNT, AccountKind.EXTERNAL),
)


@dataclass(frozen=True)
class JobPayment:
    """The results of one payment step; a zero amount writes no transfer and has no result."""

    results: tuple[TransferResult, ...]

    # Written out like ledger.model.TransferResult's: a batch answers one of these per job.
    def __init__(self, results: tuple[TransferResult, ...]) -> None:
        object.__setattr__(self, "__dict__", {"results": results})

    @property
    def ok(self) -> bool:
        return all(result.ok for result in self.results)

    @property
    def failure(self) -> TransferResult | None:
        """The operation that failed (the others of its batch answer linked_event_failed)."""
        return next(
            (result for result in self.results if not result.ok and result.code is not ResultCode.LINKED_EVENT_FAILED),
            None,
        )


def operator_account_id(operator_id: OperatorId) -> str:
    return f"operator:{operator_id}"


def consumer_account_id(consumer_id: ConsumerId) -> str:
    return f"consumer:{consumer_id}"


def ensure_system_accounts(session: Session) -> None:
    if accounts_exist(session, SYSTEM_ACCOUNTS):  # every payment step asks: one read answers
        return
    for account_id, kind in SYSTEM_ACCOUNTS:
        code = ensure_account(session, account_id, kind)
        assert code in OK_CODES, f"system account {account_id} is misconfigured: {code}"


def open_consumer_account(session: Session, consumer_id: ConsumerId) -> ResultCode:
    """A prepaid account that can never be overdrawn."""
    return ensure_account(session, consumer_account_id(consumer_id), AccountKind.CONSUMER)


def open_operator_account(session: Session, operator_id: OperatorId) -> ResultCode:
    return ensure_account(session, operator_account_id(operator_id), AccountKind.OPERATOR)


def deposit_for_consumer(
    session: Session, deposit_id: str, consumer_id: ConsumerId, amount: int, *, now_us: int | None = None
) -> TransferResult:
    """Credit a consumer's prepaid account; deposit_id is the payment's own reference, for idempotency."""
    ensure_system_accounts(session)
    request = TransferRequest(
        id=deposit_id,
        debit_account=EXTERNAL_DEPOSITS_ACCOUNT,
        credit_account=consumer_account_id(consumer_id),
        amount=amount,
        kind=TransferKind.DEPOSIT,
    )
    return create_transfer(session, request, now_us=now_us)


def reservation_request(job_id: JobId, consumer_id: ConsumerId, amount: int, timeout_s: int = 0) -> TransferRequest:
    """The pending consumer -> escrow transfer that reserves a job's maximum charge."""
    return TransferRequest(
        id=job_transfer_id(job_id, _RESERVE),
        debit_account=consumer_account_id(consumer_id),
        credit_account=CONSUMER_ESCROW_ACCOUNT,
        amount=amount,
        kind=_JOB_RESERVE,
        job_id=job_id,
        pending=True,
        timeout_s=timeout_s,
    )


def reserve_job(
    session: Session,
    job_id: JobId,
    consumer_id: ConsumerId,
    amount: int,
    *,
    timeout_s: int = 0,
    now_us: int | None = None,
) -> TransferResult:
    """Hold `amount` (policy.max_job_charge) of the consumer's balance for the job.

    Answers `debit_account_not_found` when the consumer has no prepaid account and
    `exceeds_credits` when the balance is short; a zero amount is `invalid_amount`
    (a free job needs no reservation). With timeout_s, expire_job may release it later.
    """
    request = reservation_request(job_id, consumer_id, amount, timeout_s)
    result = create_transfer(session, request, now_us=now_us)
    # Every submit reserves: the system accounts are made on the first one rather than
    # checked on each (a refused transfer writes nothing, so it is simply made again).
    if result.code is ResultCode.CREDIT_ACCOUNT_NOT_FOUND:
        ensure_system_accounts(session)
        result = create_transfer(session, request, now_us=now_us)
    return result


def _escrow_payout(
    job_id: JobId, step: JobStep, credit_account: str, amount: int, kind: TransferKind, price: JobPrice
) -> TransferRequest:
    return TransferRequest(
        id=job_transfer_id(job_id, step),
        debit_account=CONSUMER_ESCROW_ACCOUNT,
        credit_account=credit_account,
        amount=amount,
        kind=kind,
        job_id=job_id,
        policy_version=price.policy_version,
    )


def _fee_payouts(job_id: JobId, price: JobPrice) -> list[Operation]:
    if price.network_fee == 0:
        return []
    fee = _escrow_payout(
        job_id, _FEE, TREASURY_FEES_ACCOUNT, price.network_fee, _JOB_NETWORK_FEE, price
    )
    return [fee]


def _escrow_payouts(job_id: JobId, operator_id: OperatorId, price: JobPrice) -> list[Operation]:
    payouts: list[Operation] = []
    if price.operator_credit > 0:
        payouts.append(
            _escrow_payout(
                job_id,
                JobStep.CREDIT,
                operator_account_id(operator_id),
                price.operator_credit,
                TransferKind.JOB_OPERATOR_CREDIT,
                price,
            )
        )
    return payouts + _fee_payouts(job_id, price)


def settle_job(
    session: Session,
    job_id: JobId,
    consumer_id: ConsumerId,
    operator_id: OperatorId,
    price: JobPrice,
    *,
    now_us: int | None = None,
) -> JobPayment:
    """Charge the consumer the job's price from its reservation and pay operator and treasury.

    All-or-nothing. A zero charge voids the reservation instead. A charge above the
    reservation answers `exceeds_pending_amount` and writes nothing.
    """
    ensure_system_accounts(session)
    if price.consumer_charge == 0:
        return JobPayment((void_job(session, job_id, now_us=now_us),))
    open_operator_account(session, operator_id)
    operations = [_charge_operation(job_id, consumer_id, price), *_escrow_payouts(job_id, operator_id, price)]
    return JobPayment(create_transfers(session, operations, now_us=now_us))


def _charge_operation(job_id: JobId, consumer_id: ConsumerId, price: JobPrice) -> PostPending:
    """Post the job's charge from its reservation into escrow."""
    return PostPending(
        id=job_transfer_id(job_id, _POST),
        pending_id=job_transfer_id(job_id, _RESERVE),
        amount=price.consumer_charge,
        kind=_JOB_CHARGE,
        policy_version=price.policy_version,
        debit_account=consumer_account_id(consumer_id),
        credit_account=CONSUMER_ESCROW_ACCOUNT,
    )


def void_job(session: Session, job_id: JobId, *, now_us: int | None = None) -> TransferResult:
    """Release the whole reservation (job failed or cancelled); `pending_already_resolved` if settled."""
    return create_transfers(session, [_void_operation(job_id)], now_us=now_us)[0]


def _void_operation(job_id: JobId) -> VoidPending:
    return VoidPending(
        id=job_transfer_id(job_id, JobStep.VOID),
        pending_id=job_transfer_id(job_id, JobStep.RESERVE),
        kind=TransferKind.JOB_RELEASE,
    )


def expire_job(session: Session, job_id: JobId, *, now_us: int | None = None) -> TransferResult:
    """Release a reservation whose timeout has passed (a coordinator lost track of the job)."""
    expire = ExpirePending(
        id=job_transfer_id(job_id, JobStep.EXPIRE),
        pending_id=job_transfer_id(job_id, JobStep.RESERVE),
        kind=TransferKind.JOB_RELEASE,
    )
    return create_transfers(session, [expire], now_us=now_us)[0]


def credit_operator_for_job(
    session: Session,
    job_id: JobId,
    operator_id: OperatorId,
    price: JobPrice,
    *,
    now_us: int | None = None,
) -> JobPayment:
    """Pay the operator's share from the issuance account (no consumer charge, no fee).

    Shares the operator-credit id with settle_job: after one, the other answers
    `exists_with_different_fields` and pays nothing.
    """
    ensure_system_accounts(session)
    if price.operator_credit == 0:
        return JobPayment(())
    open_operator_account(session, operator_id)
    request = TransferRequest(
        id=job_transfer_id(job_id, JobStep.CREDIT),
        debit_account=ISSUANCE_REWARDS_ACCOUNT,
        credit_account=operator_account_id(operator_id),
        amount=price.operator_credit,
        kind=TransferKind.JOB_OPERATOR_CREDIT,
        job_id=job_id,
        policy_version=price.policy_version,
    )
    return JobPayment((create_transfer(session, request, now_us=now_us),))


def _held_credit(
    job_id: JobId, debit_account: str, operator_id: OperatorId, price: JobPrice, hold_s: int
) -> TransferRequest:
    return TransferRequest(
        id=job_transfer_id(job_id, _CREDIT),
        debit_account=debit_account,
        credit_account=operator_account_id(operator_id),
        amount=price.operator_credit,
        kind=_JOB_OPERATOR_CREDIT,
        job_id=job_id,
        policy_version=price.policy_version,
        pending=True,
        timeout_s=hold_s + CREDIT_HOLD_GRACE_S,
    )


def completion_operations(
    job_id: JobId, consumer_id: ConsumerId | None, operator_id: OperatorId, price: JobPrice, hold_s: int
) -> list[Operation]:
    """complete_job's linked chain; empty when nothing is owed, a lone void when nothing is charged."""
    assert type(hold_s) is int and 0 <= hold_s <= CREDIT_HOLD_S_MAX, f"hold_s out of range: {hold_s}"
    if consumer_id is None:
        if price.operator_credit == 0:
            return []
        return [_held_credit(job_id, ISSUANCE_REWARDS_ACCOUNT, operator_id, price, hold_s)]
    if price.consumer_charge == 0:
        return [_void_operation(job_id)]
    operations: list[Operation] = [_charge_operation(job_id, consumer_id, price)]
    if price.operator_credit > 0:
        operations.append(_held_credit(job_id, CONSUMER_ESCROW_ACCOUNT, operator_id, price, hold_s))
    operations.extend(_fee_payouts(job_id, price))
    return operations


def credits_operator(operations: list[Operation]) -> bool:
    """Whether a completion chain pays the operator (and so needs its account)."""
    return bool(operations) and not isinstance(operations[0], VoidPending)


_ACCOUNT_MISSING = frozenset({ResultCode.DEBIT_ACCOUNT_NOT_FOUND, ResultCode.CREDIT_ACCOUNT_NOT_FOUND})


def complete_job(
    session: Session,
    job_id: JobId,
    consumer_id: ConsumerId | None,
    operator_id: OperatorId,
    price: JobPrice,
    *,
    hold_s: int,
    now_us: int | None = None,
) -> JobPayment:
    """A job finished with a verified receipt: charge for the tokens made, hold the operator's credit.

    With a consumer (who has a reservation): post price.consumer_charge of the reservation
    into escrow (the rest returns to the consumer), hold escrow -> operator PENDING and pay
    the fee escrow -> treasury, all or nothing. Without one (anonymous): hold issuance ->
    operator PENDING. The held credit expires hold_s + CREDIT_HOLD_GRACE_S after now, so
    release it at the window's close. A zero charge voids the reservation instead.
    """
    operations = completion_operations(job_id, consumer_id, operator_id, price, hold_s)
    if not operations:
        return JobPayment(())
    payment = JobPayment(create_transfers(session, operations, now_us=now_us))
    # As reserve_job: the accounts are made when a payment finds one missing rather than
    # checked on every receipt (a refused payment writes nothing, so it is simply made again).
    failure = payment.failure
    if failure is not None and failure.code in _ACCOUNT_MISSING:
        ensure_system_accounts(session)
        if credits_operator(operations):
            open_operator_account(session, operator_id)
        payment = JobPayment(create_transfers(session, operations, now_us=now_us))
    return payment


def release_operation(job_id: JobId) -> PostPending:
    """Posts the operator's held credit."""
    return PostPending(
        id=job_transfer_id(job_id, _RELEASE),
        pending_id=job_transfer_id(job_id, _CREDIT),
        kind=_JOB_OPERATOR_CREDIT,
    )


def release_job_credit(session: Session, job_id: JobId, *, now_us: int | None = None) -> JobPayment:
    """Post the operator's held credit (check passed or window closed).

    No results when the job holds no credit (nothing earned); `exists` on a retry;
    `pending_already_resolved` after reject_job_credit; `pending_transfer_not_pending`
    when the credit was paid at once by credit_operator_for_job or settle_job.
    """
    if get_transfer(session, job_transfer_id(job_id, JobStep.CREDIT)) is None:
        return JobPayment(())
    return JobPayment(create_transfers(session, [release_operation(job_id)], now_us=now_us))


def reject_job_credit(session: Session, job_id: JobId, *, now_us: int | None = None) -> JobPayment:
    """Void the operator's held credit and give the consumer back the whole charge (check failed).

    The charge returns as escrow -> consumer (what the credit held) plus treasury ->
    consumer (the fee), all or nothing, so the consumer pays nothing for the job.
    `pending_already_resolved` (nothing written) after release_job_credit.
    """
    credit = get_transfer(session, job_transfer_id(job_id, JobStep.CREDIT))
    charge = get_transfer(session, job_transfer_id(job_id, JobStep.POST))
    operations: list[Operation] = []
    if credit is not None:
        operations.append(
            VoidPending(
                id=job_transfer_id(job_id, JobStep.REJECT),
                pending_id=credit.id,
                kind=TransferKind.JOB_OPERATOR_CREDIT,
            )
        )
    if charge is not None and charge.state is TransferState.POSTED:
        operations.extend(_refunds(session, job_id, charge.debit_account, charge.amount))
    if not operations:
        return JobPayment(())
    return JobPayment(create_transfers(session, operations, now_us=now_us))


def _refunds(session: Session, job_id: JobId, consumer_account: str, charge: int) -> list[Operation]:
    fee = get_transfer(session, job_transfer_id(job_id, JobStep.FEE))
    fee_amount = 0 if fee is None else fee.amount
    assert 0 <= fee_amount <= charge, f"job {job_id}: fee {fee_amount} above its charge {charge}"
    refunds: list[Operation] = []
    for step, debit_account, amount in (
        (JobStep.REFUND, CONSUMER_ESCROW_ACCOUNT, charge - fee_amount),
        (JobStep.FEE_REFUND, TREASURY_FEES_ACCOUNT, fee_amount),
    ):
        if amount > 0:
            refunds.append(
                TransferRequest(
                    id=job_transfer_id(job_id, step),
                    debit_account=debit_account,
                    credit_account=consumer_account,
                    amount=amount,
                    kind=TransferKind.JOB_REFUND,
                    job_id=job_id,
                )
            )
    return refunds


def check_fee_transfer_id(check_id: str) -> str:
    """The one transfer that pays a check job: the same check always gives the same id."""
    transfer_id = f"check:{check_id}"
    assert valid_id(transfer_id), f"check ids are short printable text without spaces: {check_id!r}"
    return transfer_id


def pay_check_fee(
    session: Session,
    check_id: str,
    job_id: JobId,
    operator_id: OperatorId,
    amount: int,
    *,
    from_fees: bool,
    now_us: int | None = None,
) -> TransferResult | None:
    """Pay a peer's operator for checking a job, out of the network's share.

    from_fees: the job's network fee was collected and kept (the treasury pays); otherwise
    (an anonymous job, or a failed one whose fee went back to the consumer) the network pays
    from issuance, as it pays anonymous jobs' credits. None when the amount is zero; `exists`
    on a retry, so a check is paid at most once.
    """
    if amount == 0:
        return None
    ensure_system_accounts(session)
    open_operator_account(session, operator_id)
    request = TransferRequest(
        id=check_fee_transfer_id(check_id),
        debit_account=TREASURY_FEES_ACCOUNT if from_fees else ISSUANCE_REWARDS_ACCOUNT,
        credit_account=operator_account_id(operator_id),
        amount=amount,
        kind=TransferKind.CHECK_FEE,
        job_id=job_id,
    )
    return create_transfer(session, request, now_us=now_us)
