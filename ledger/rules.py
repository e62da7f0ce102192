"""The posting rules, pure: a batch of operations over a snapshot becomes results and new rows.

Nothing here touches the database. The shell (ledger.book) loads a snapshot under the
chain-head lock, calls evaluate_chains, and writes only the chains that succeeded, so
each chain is all-or-nothing without savepoints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ledger.chain import row_encoder
from ledger.model import (
    BATCH_SIZE_MAX,
    OPERATIONS_PER_CALL_MAX,
    ID_LENGTH_MAX,
    OK_CODES,
    POLICY_VERSION_LENGTH_MAX,
    TIMEOUT_S_MAX,
    Account,
    Balance,
    BalanceChange,
    ChainHead,
    ExpirePending,
    Operation,
    PostPending,
    Resolution,
    ResultCode,
    Transfer,
    TransferKind,
    TransferRequest,
    TransferResult,
    TransferState,
    VoidPending,
)
from ledger.units import AMOUNT_MAX

Outcome = tuple[ResultCode, Transfer | None]

# Members read on every transfer, bound once: EnumType defines __getattr__, which makes
# each `TransferState.PENDING` in a function a slow class lookup (about 0.1 us).
_PENDING, _POSTED = TransferState.PENDING, TransferState.POSTED
_CREATED, _EXISTS = ResultCode.CREATED, ResultCode.EXISTS
assert OK_CODES == {_CREATED, _EXISTS}, "_apply_chain tests the OK codes by identity"


@dataclass(frozen=True)
class Snapshot:
    """The rows a batch can touch, read under the chain-head lock."""

    head: ChainHead
    transfers: Mapping[str, Transfer]  # by id: the batch's ids and the pending ids it names
    resolutions: Mapping[str, Transfer]  # by the pending id each one resolves
    accounts: Mapping[str, Account]
    closed_until_us: int = 0  # the last closed epoch's cutoff: nothing may be dated at or before it


@dataclass(frozen=True)
class Evaluation:
    """What a call's chains did: each chain's results, and the rows of the chains that succeeded."""

    chain_results: tuple[tuple[TransferResult, ...], ...]  # one tuple per chain, in call order
    new_transfers: tuple[Transfer, ...]  # in chain order, failed chains left out
    balance_changes: Mapping[str, BalanceChange]  # by account id

    @property
    def results(self) -> tuple[TransferResult, ...]:
        return tuple(result for chain in self.chain_results for result in chain)

    @property
    def ok(self) -> bool:
        return all(result.ok for chain in self.chain_results for result in chain)


def valid_id(value: object) -> bool:
    """Ids are short printable text without spaces, so they read well in logs and URLs."""
    # isprintable() already refuses every whitespace character except the ASCII space.
    return isinstance(value, str) and 0 < len(value) <= ID_LENGTH_MAX and value.isprintable() and " " not in value


def valid_amount(value: object) -> bool:
    return type(value) is int and 0 < value <= AMOUNT_MAX


def balance_changes(transfer: Transfer, pending: Transfer | None) -> tuple[BalanceChange, BalanceChange]:
    """What a transfer does to its (debit account, credit account) balances."""
    amount = transfer.amount
    if transfer.state is TransferState.PENDING:
        return BalanceChange(debits_pending=amount), BalanceChange(credits_pending=amount)
    if pending is None:
        assert transfer.state is TransferState.POSTED and transfer.pending_id is None
        return BalanceChange(debits_posted=amount), BalanceChange(credits_posted=amount)
    assert transfer.pending_id == pending.id and amount <= pending.amount
    posted = amount if transfer.state is TransferState.POSTED else 0
    return (
        BalanceChange(debits_pending=-pending.amount, debits_posted=posted),
        BalanceChange(credits_pending=-pending.amount, credits_posted=posted),
    )


class _Running:
    """An account's balance while a call is evaluated: mutable, so thousands of transfers stay cheap."""

    __slots__ = ("debits_pending", "debits_posted", "credits_pending", "credits_posted")

    def __init__(self, balance: Balance) -> None:
        self.debits_pending = balance.debits_pending
        self.debits_posted = balance.debits_posted
        self.credits_pending = balance.credits_pending
        self.credits_posted = balance.credits_posted

    def frozen(self) -> Balance:
        return Balance(self.debits_pending, self.debits_posted, self.credits_pending, self.credits_posted)


class _Working:
    """The snapshot plus what earlier operations of the call have done to it.

    A failed chain is undone by replaying its own transfers backwards (mark, then rollback),
    so the chains after it see exactly the state they would see had it never been tried.
    """

    def __init__(self, snapshot: Snapshot, now_us: int) -> None:
        self.now_us = now_us
        self.transfers = dict(snapshot.transfers)
        self.resolutions = dict(snapshot.resolutions)
        self.accounts = snapshot.accounts
        self.balances = {account_id: _Running(account.balance) for account_id, account in snapshot.accounts.items()}
        self.head = snapshot.head
        self.last_sequence = snapshot.head.last_sequence
        self.last_hash = snapshot.head.last_hash
        self.appended: list[tuple[Transfer, Transfer | None]] = []  # (transfer, the pending one it resolves)
        # Texts that passed valid_id (account and job ids) or _valid_policy_version in this call:
        # they repeat across its chains, so each is checked once.
        self.valid_ids: set[str] = set()
        self.valid_policy_versions: set[str] = set()
        self._encode = row_encoder()  # chain.row_hash's encoding, remembering the text of repeated fields

    def append(self, transfer_id: str, debit_account: str, credit_account: str, amount: int, state: TransferState,
               pending: Transfer | None, timeout_s: int, job_id: str | None, kind: TransferKind,
               policy_version: str | None) -> Transfer:
        """The new transfer, linked after the last one: built once, with its hash (no draft to copy)."""
        sequence, prev_hash, now_us = self.last_sequence + 1, self.last_hash, self.now_us
        pending_id = None if pending is None else pending.id
        link_hash = hashlib.sha256(self._encode((sequence, transfer_id, debit_account, credit_account, amount, state,
                                                 pending_id, timeout_s, job_id, kind, policy_version, now_us,
                                                 prev_hash))).hexdigest()
        transfer = Transfer(sequence, transfer_id, debit_account, credit_account, amount, state, pending_id,
                            timeout_s, job_id, kind, policy_version, now_us, prev_hash, link_hash)
        self.last_sequence, self.last_hash = sequence, link_hash
        self.transfers[transfer.id] = transfer
        if pending is not None:
            self.resolutions[pending.id] = transfer
        self._move(transfer, pending, 1)
        self.appended.append((transfer, pending))
        return transfer

    def _move(self, transfer: Transfer, pending: Transfer | None, sign: int) -> None:
        """balance_changes applied in place (sign -1 undoes it), without building change records."""
        debit, credit = self.balances[transfer.debit_account], self.balances[transfer.credit_account]
        amount = sign * transfer.amount
        if transfer.state is _PENDING:
            debit.debits_pending += amount
            credit.credits_pending += amount
            return
        if pending is None:
            debit.debits_posted += amount
            credit.credits_posted += amount
            return
        released = sign * pending.amount
        posted = amount if transfer.state is _POSTED else 0
        debit.debits_pending -= released
        debit.debits_posted += posted
        credit.credits_pending -= released
        credit.credits_posted += posted

    def mark(self) -> int:
        return len(self.appended)

    def rollback(self, mark: int) -> None:
        while len(self.appended) > mark:
            transfer, pending = self.appended.pop()
            del self.transfers[transfer.id]
            if pending is not None:
                del self.resolutions[pending.id]
            self._move(transfer, pending, -1)
        last = self.appended[-1][0] if self.appended else None
        self.last_sequence = self.head.last_sequence if last is None else last.sequence
        self.last_hash = self.head.last_hash if last is None else last.hash


def evaluate(operations: Sequence[Operation], snapshot: Snapshot, now_us: int) -> Evaluation:
    """One chain: apply the operations in order; on the first failure, nothing is written."""
    return evaluate_chains([operations], snapshot, now_us)


SETTLE_EVERY_CHAINS = 64  # how often evaluate_chains hands its settled rows on


def evaluate_chains(chains: Sequence[Sequence[Operation]], snapshot: Snapshot, now_us: int,
                    settled: Callable[[Sequence[Transfer]], None] | None = None) -> Evaluation:
    """Apply each chain all-or-nothing, in order; a failed chain leaves no trace for the ones after it.

    Equivalent to evaluating the chains one call at a time, each over the state the
    previous ones left, which the batched-path tests check. settled, when given, gets
    the new transfers of finished chains as they become final, in order, every
    SETTLE_EVERY_CHAINS chains and at the end: a writer can send them while later
    chains are still being evaluated.
    """
    lengths = list(map(len, chains))
    assert 1 <= sum(lengths) <= OPERATIONS_PER_CALL_MAX
    assert min(lengths) >= 1 and max(lengths) <= BATCH_SIZE_MAX, f"a chain holds 1..{BATCH_SIZE_MAX}"
    assert type(now_us) is int and now_us > 0
    if now_us <= snapshot.closed_until_us:
        closed = tuple(_failed(chain, 0, TransferResult(chain[0].id, ResultCode.EPOCH_CLOSED)) for chain in chains)
        return Evaluation(closed, (), {})
    working = _Working(snapshot, now_us)
    if settled is None:
        chain_results = tuple(_apply_chain(chain, working) for chain in chains)
    else:
        chain_results = _apply_chains_settling(chains, working, settled)
    changes: dict[str, BalanceChange] = {}
    for account_id, running in working.balances.items():
        before = snapshot.accounts[account_id].balance
        after = running.frozen()
        if after != before:
            changes[account_id] = after.minus(before)
    new_transfers = tuple(transfer for transfer, _ in working.appended)
    return Evaluation(chain_results, new_transfers, changes)


def _apply_chains_settling(chains: Sequence[Sequence[Operation]], working: _Working,
                           settled: Callable[[Sequence[Transfer]], None]) -> tuple[tuple[TransferResult, ...], ...]:
    results = []
    handed = 0  # appended rows before this are final: only the chain being applied can roll back
    for number, chain in enumerate(chains, 1):
        results.append(_apply_chain(chain, working))
        if number % SETTLE_EVERY_CHAINS == 0 or number == len(chains):
            settled([transfer for transfer, _ in working.appended[handed:]])
            handed = len(working.appended)
    return tuple(results)


def _apply_chain(chain: Sequence[Operation], working: _Working) -> tuple[TransferResult, ...]:
    mark = working.mark()
    results: list[TransferResult] = []
    for index, operation in enumerate(chain):
        if isinstance(operation, TransferRequest):
            code, transfer = _create(operation, working)
        else:
            code, transfer = _resolve(operation, working)
        results.append(TransferResult(operation.id, code, transfer))
        if code is not _CREATED and code is not _EXISTS:  # OK_CODES, by identity
            working.rollback(mark)
            return _failed(chain, index, results[-1])
    return tuple(results)


def _failed(chain: Sequence[Operation], failed_index: int, failure: TransferResult) -> tuple[TransferResult, ...]:
    return tuple(
        failure if index == failed_index else TransferResult(operation.id, ResultCode.LINKED_EVENT_FAILED)
        for index, operation in enumerate(chain)
    )


def _validate_request(request: TransferRequest, working: _Working) -> ResultCode | None:
    assert isinstance(request.kind, TransferKind) and type(request.pending) is bool
    known = working.valid_ids
    debit_account, credit_account = request.debit_account, request.credit_account
    if not (valid_id(request.id)
            and ((type(debit_account) is str and debit_account in known) or _remember(debit_account, known))
            and ((type(credit_account) is str and credit_account in known) or _remember(credit_account, known))):
        return ResultCode.INVALID_ID
    if not valid_amount(request.amount):
        return ResultCode.INVALID_AMOUNT
    if request.debit_account == request.credit_account:
        return ResultCode.ACCOUNTS_MUST_DIFFER
    timeout_s = request.timeout_s
    if type(timeout_s) is not int or not 0 <= timeout_s <= TIMEOUT_S_MAX or (timeout_s and not request.pending):
        return ResultCode.INVALID_TIMEOUT
    job_id, policy_version = request.job_id, request.policy_version
    if not ((job_id is None or (type(job_id) is str and job_id in known) or _remember(job_id, known))
            and _valid_policy_version(policy_version, working)):
        return ResultCode.INVALID_FIELD
    return None


def _remember(value: object, known: set[str]) -> bool:
    """valid_id, and remember the value when it passes."""
    if valid_id(value):
        known.add(value)  # type: ignore[arg-type]  # valid_id holds only for str
        return True
    return False


def _valid_policy_version(policy_version: object, working: _Working) -> bool:
    """None, or an id of at most POLICY_VERSION_LENGTH_MAX characters (remembered for the call)."""
    if policy_version is None or (type(policy_version) is str and policy_version in working.valid_policy_versions):
        return True
    if valid_id(policy_version) and len(policy_version) <= POLICY_VERSION_LENGTH_MAX:  # type: ignore[arg-type]
        working.valid_policy_versions.add(policy_version)  # type: ignore[arg-type]
        return True
    return False


def _same_request(existing: Transfer, request: TransferRequest) -> bool:
    expected_state = _PENDING if request.pending else _POSTED
    return (
        existing.state is expected_state
        and existing.pending_id is None
        and existing.debit_account == request.debit_account
        and existing.credit_account == request.credit_account
        and existing.amount == request.amount
        and existing.timeout_s == request.timeout_s
        and existing.kind is request.kind
        and existing.job_id == request.job_id
        and existing.policy_version == request.policy_version
    )


def _create(request: TransferRequest, working: _Working) -> Outcome:
    invalid = _validate_request(request, working)
    if invalid is not None:
        return invalid, None
    existing = working.transfers.get(request.id)
    if existing is not None:
        same = _same_request(existing, request)
        return (ResultCode.EXISTS if same else ResultCode.EXISTS_WITH_DIFFERENT_FIELDS), existing
    debit = working.accounts.get(request.debit_account)
    if debit is None:
        return ResultCode.DEBIT_ACCOUNT_NOT_FOUND, None
    if request.credit_account not in working.accounts:
        return ResultCode.CREDIT_ACCOUNT_NOT_FOUND, None
    debit_balance = working.balances[request.debit_account]
    credit_balance = working.balances[request.credit_account]
    debits_after = debit_balance.debits_pending + debit_balance.debits_posted + request.amount
    if debits_after > AMOUNT_MAX:
        return ResultCode.OVERFLOWS_DEBITS, None
    if credit_balance.credits_pending + credit_balance.credits_posted + request.amount > AMOUNT_MAX:
        return ResultCode.OVERFLOWS_CREDITS, None
    if debit.debits_must_not_exceed_credits and debits_after > debit_balance.credits_posted:
        return ResultCode.EXCEEDS_CREDITS, None
    state = _PENDING if request.pending else _POSTED
    transfer = working.append(request.id, request.debit_account, request.credit_account, request.amount, state,
                              None, request.timeout_s, request.job_id, request.kind, request.policy_version)
    return _CREATED, transfer


_RESOLVED_STATE = {
    PostPending: TransferState.POSTED,
    VoidPending: TransferState.VOIDED,
    ExpirePending: TransferState.EXPIRED,
}


def _resolved_fields(resolution: Resolution, pending: Transfer) -> tuple[int, TransferKind, str | None]:
    """(amount, kind, policy_version) of the transfer that resolves `pending` this way."""
    amount = pending.amount
    policy_version = pending.policy_version
    if isinstance(resolution, PostPending):
        amount = pending.amount if resolution.amount is None else resolution.amount
        policy_version = resolution.policy_version or pending.policy_version
    return amount, resolution.kind or pending.kind, policy_version


def _same_resolution(existing: Transfer, resolution: Resolution, pending: Transfer | None) -> bool:
    if pending is None or existing.pending_id != resolution.pending_id:
        return False
    if existing.state is not _RESOLVED_STATE[type(resolution)]:
        return False
    if _account_mismatch(resolution, pending) is not None:
        return False
    amount, kind, policy_version = _resolved_fields(resolution, pending)
    return (existing.amount, existing.kind, existing.policy_version) == (amount, kind, policy_version)


def _validate_resolution(resolution: Resolution, working: _Working) -> ResultCode | None:
    assert resolution.kind is None or isinstance(resolution.kind, TransferKind)
    if not (valid_id(resolution.id) and valid_id(resolution.pending_id)):
        return ResultCode.INVALID_ID
    if resolution.id == resolution.pending_id:
        return ResultCode.PENDING_ID_MUST_DIFFER
    if isinstance(resolution, PostPending):
        if resolution.amount is not None and not valid_amount(resolution.amount):
            return ResultCode.INVALID_AMOUNT
        if not _valid_policy_version(resolution.policy_version, working):
            return ResultCode.INVALID_FIELD
    return None


def _account_mismatch(resolution: Resolution, pending: Transfer) -> ResultCode | None:
    debit_account = getattr(resolution, "debit_account", None)
    credit_account = getattr(resolution, "credit_account", None)
    if debit_account is not None and debit_account != pending.debit_account:
        return ResultCode.PENDING_TRANSFER_HAS_DIFFERENT_DEBIT_ACCOUNT
    if credit_account is not None and credit_account != pending.credit_account:
        return ResultCode.PENDING_TRANSFER_HAS_DIFFERENT_CREDIT_ACCOUNT
    return None


def _timing_problem(resolution: Resolution, pending: Transfer, now_us: int) -> ResultCode | None:
    """Post and void must come before the deadline; expiry only after it."""
    expires_at_us = pending.expires_at_us
    if isinstance(resolution, ExpirePending):
        if expires_at_us is None:
            return ResultCode.PENDING_TRANSFER_HAS_NO_TIMEOUT
        return ResultCode.PENDING_TRANSFER_NOT_EXPIRED if now_us < expires_at_us else None
    if expires_at_us is not None and now_us >= expires_at_us:
        return ResultCode.PENDING_TRANSFER_EXPIRED
    return None


def _resolve(resolution: Resolution, working: _Working) -> Outcome:
    invalid = _validate_resolution(resolution, working)
    if invalid is not None:
        return invalid, None
    pending = working.transfers.get(resolution.pending_id)
    existing = working.transfers.get(resolution.id)
    if existing is not None:
        same = _same_resolution(existing, resolution, pending)
        return (ResultCode.EXISTS if same else ResultCode.EXISTS_WITH_DIFFERENT_FIELDS), existing
    if pending is None:
        return ResultCode.PENDING_TRANSFER_NOT_FOUND, None
    if pending.state is not _PENDING:
        return ResultCode.PENDING_TRANSFER_NOT_PENDING, None
    problem = _account_mismatch(resolution, pending)
    if problem is None and pending.id in working.resolutions:
        problem = ResultCode.PENDING_ALREADY_RESOLVED
    problem = problem or _timing_problem(resolution, pending, working.now_us)
    amount, kind, policy_version = _resolved_fields(resolution, pending)
    if problem is None and amount > pending.amount:
        problem = ResultCode.EXCEEDS_PENDING_AMOUNT
    if problem is not None:
        return problem, None
    transfer = working.append(resolution.id, pending.debit_account, pending.credit_account, amount,
                              _RESOLVED_STATE[type(resolution)], pending, 0, pending.job_id, kind, policy_version)
    return _CREATED, transfer
