"""`mlxnet ledger audit`: one pass over the journal that checks everything an operator can recompute.

- the hash chain: every link, sequence and hash (a hand edit shows at the edited transfer);
- balances: every account's stored balance against the replayed transfers;
- epochs: each payout sweep moved exactly the operator's balance, each root rebuilds
  from the payouts, and the journal head recorded at the close is still there;
- signed heads (given the coordinator's public keys, kept outside the database): each
  epoch's record carries a valid signature by one of them, so a rewrite with every later
  row re-hashed and the recorded head fixed still shows;
- kept statements (signed_statement documents an operator kept): the journal still holds
  the head and every transfer hash each one names;
- job credits (when the coordinator supplies the receipts): each credit equals the
  policy's price for the receipt's token counts, under the version the transfer names;
- queued completions (ledger.posting_queue): owed and not yet posted; each is counted, checked
  against its receipt like a posted credit, and one the ledger refused is a difference;
- anchors (when a chain is supplied): each epoch's root is the one on chain.
It streams raw rows in one query through the driver's cursor (server-side on
PostgreSQL), so it runs in bounded memory without building an object per row; the
cost per transfer is mostly the driver building its row, then its encoding and sha256.
Every difference names the transfer (or epoch) behind it.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from ledger.storage import epoch_store, queue_store, store
from ledger.anchoring import PayoutChainLike, check_anchors
from ledger.chain import GENESIS_HASH, stored_row_encoder
from ledger.epochs import epoch_tree
from ledger.head_signatures import head_problem
from ledger.model import TransferKind
from ledger.policy import price_job, policy_for_version
from ledger.statements import statement_marks, statement_problem

# Small enough that a page's rows stay in the CPU cache while they are hashed: 5,000-row
# pages cost about 10% more CPU a transfer than 1,000-row ones (bench.ledger, both databases).
AUDIT_PAGE_SIZE = 1_000
DIFFERENCES_MAX = 1_000  # stop collecting past this: the first ones say what broke
_CREDIT = str(TransferKind.JOB_OPERATOR_CREDIT)
_PAYOUT = str(TransferKind.EPOCH_PAYOUT)


@dataclass(frozen=True)
class ExpectedCredit:
    """What a job's receipt says, for recomputing its operator credit."""

    job_id: str
    operator_id: str
    parameter_count: int
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Difference:
    check: str  # chain, balance, epoch, credit, queued, anchor
    subject: str  # the transfer id, account id or epoch that causes it
    detail: str


@dataclass
class AuditReport:
    transfers_checked: int = 0
    epochs_checked: int = 0
    credits_checked: int = 0
    queued_completions: int = 0  # committed with their receipts, not yet posted (ledger.posting_queue)
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def add(self, check: str, subject: str, detail: str) -> None:
        if len(self.differences) < DIFFERENCES_MAX:
            self.differences.append(Difference(check, subject, detail))


def _pages(session: Session) -> Iterator[Sequence[tuple]]:  # type: ignore[type-arg]
    """Every transfer row in chain order, then whatever writers appended while the scan ran."""
    after = 0
    while True:
        scanned = after
        for page in store.transfer_row_pages(session, after, AUDIT_PAGE_SIZE):
            yield page
            after = page[-1][0]
        # One streaming query sees one snapshot; under READ COMMITTED the head may have moved on.
        if after == scanned or store.read_chain_head(session).last_sequence <= after:
            return


@dataclass
class _Replay:
    # dp, dpo, cp, cpo by account; a defaultdict, so the per-transfer lookup stays in C.
    balances: defaultdict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0, 0]))
    open_pending: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    credits: dict[str, list[tuple[str, str, int, str | None]]] = field(default_factory=dict)
    hashes: dict[int, str] = field(default_factory=dict)  # only at epoch heads and statements' marks


def audit(session: Session, *, chain: PayoutChainLike | None = None,
          expected_credits: Sequence[ExpectedCredit] | None = None,
          trusted_keys: frozenset[str] | None = None,
          statements: Sequence[dict[str, Any]] = ()) -> AuditReport:
    """trusted_keys: hex Ed25519 public keys whose head signatures count (None: not checked)."""
    report = AuditReport()
    epochs = epoch_store.all_epochs(session)
    marks = _statement_marks(report, statements, trusted_keys)
    heads = {epoch.last_sequence for epoch in epochs} | {sequence for _, sequence, _, _ in marks}
    replay = _Replay()
    _scan(session, report, replay, heads)
    _check_balances(session, report, replay.balances)
    _check_epochs(session, report, replay, epochs)
    if trusted_keys is not None:
        signed = epoch_store.head_signatures(session)
        for epoch in epochs:
            problem = head_problem(epoch, signed.get(epoch.number), trusted_keys)
            if problem is not None:
                report.add("signature", f"epoch {epoch.number}", problem)
    for operator, sequence, expected_hash, what in marks:
        found = replay.hashes.get(sequence)
        if found != expected_hash:
            now = "is missing" if found is None else f"now hashes to {found}"
            report.add("statement", f"sequence {sequence}", f"{what} in {operator}'s kept statement was "
                       f"{expected_hash}; the journal's row at that sequence {now}")
    if expected_credits is not None:
        _check_credits(report, replay.credits, expected_credits)
    _check_queued(session, report, expected_credits)
    if chain is not None:
        for problem in check_anchors(session, chain):
            report.add("anchor", f"epoch {problem.epoch}", problem.reason)
    return report


def _statement_marks(report: AuditReport, statements: Sequence[dict[str, Any]],
                     trusted_keys: frozenset[str] | None) -> list[tuple[str, int, str, str]]:
    """(operator, sequence, hash, what) for every journal position the kept statements name."""
    marks = []
    for document in statements:
        operator = str(document.get("operator", "?")) if isinstance(document, dict) else "?"
        problem = None if trusted_keys is None else statement_problem(document, trusted_keys)
        if problem is not None:
            report.add("statement", f"statement of {operator}", problem)
            continue
        try:
            marks.extend((operator, sequence, hash_, what) for sequence, hash_, what in statement_marks(document))
        except ValueError as error:
            report.add("statement", f"statement of {operator}", str(error))
    return marks


def _scan(session: Session, report: AuditReport, replay: _Replay, heads: set[int]) -> None:
    expected_sequence, prev_hash, chain_ok = 1, GENESIS_HASH, True
    sha256, balances, open_pending = hashlib.sha256, replay.balances, replay.open_pending
    encode = stored_row_encoder()
    checked = report.transfers_checked
    for page in _pages(session):
        for row in page:
            (sequence, transfer_id, debit, credit, amount, state, pending_id, _timeout, job_id, kind,
             policy_version, _created, row_prev_hash, row_hash) = row
            if chain_ok:
                # encode trusts prev_hash only once it matched the previous link (the `and` keeps that order).
                if not (sequence == expected_sequence and row_prev_hash == prev_hash
                        and sha256(encode(row)).hexdigest() == row_hash):
                    report.add("chain", *_link_problem(transfer_id, sequence, expected_sequence, row_prev_hash,
                                                       prev_hash))
                    chain_ok = False
                expected_sequence, prev_hash = sequence + 1, row_hash
            if sequence in heads:
                replay.hashes[sequence] = row_hash
            if kind == _PAYOUT:
                available = balances[debit]
                before = available[3] - available[1] - available[0]
                if before != amount:
                    report.add("epoch", transfer_id, f"payout {amount} but {debit} had {before} available")
            if pending_id is None:
                pending = None
            else:
                pending = open_pending.pop(pending_id, None)
                if pending is None:
                    report.add("balance", transfer_id, f"resolves {pending_id}, which is not an open pending transfer")
                    continue
                if amount > pending[0] or (debit, credit) != pending[1:]:
                    report.add("balance", transfer_id, f"resolves {pending_id} for {amount} of {pending[0]} "
                               "or between other accounts")
            if kind == _CREDIT and pending_id is None:
                replay.credits.setdefault(job_id or "", []).append((transfer_id, credit, amount, policy_version))
            debit_fields, credit_fields = balances[debit], balances[credit]
            if state == "pending":
                open_pending[transfer_id] = (amount, debit, credit)
                debit_fields[0] += amount
                credit_fields[2] += amount
            elif pending is None:
                debit_fields[1] += amount
                credit_fields[3] += amount
            else:
                posted = amount if state == "posted" else 0
                debit_fields[0] -= pending[0]
                credit_fields[2] -= pending[0]
                debit_fields[1] += posted
                credit_fields[3] += posted
            checked += 1
        report.transfers_checked = checked  # kept current page by page, counted in a local
    head = store.read_chain_head(session)
    if chain_ok and head.last_sequence != expected_sequence - 1:
        report.add("chain", head.last_transfer_id or "(head)",
                   f"the chain head is at {head.last_sequence} but the transfers end at {expected_sequence - 1}")
    elif chain_ok and head.last_sequence and head.last_hash != prev_hash:
        report.add("chain", head.last_transfer_id or "(head)", "the chain head's hash differs from the last transfer")


def _link_problem(transfer_id: str, sequence: int, expected_sequence: int, row_prev_hash: str,
                  prev_hash: str) -> tuple[str, str]:
    """(subject, detail): why a row failed the chain check, in the order the checks ran.

    A missing row is named by its own sequence (or the run of them), not by the row after it.
    """
    if sequence > expected_sequence:
        missing = (f"sequence {expected_sequence}" if sequence == expected_sequence + 1
                   else f"sequences {expected_sequence}-{sequence - 1}")
        detail = f"missing from the journal: {transfer_id} at sequence {sequence} follows {expected_sequence - 1}"
        return missing, detail
    if sequence != expected_sequence:
        return transfer_id, f"expected sequence {expected_sequence}, found {sequence}: the rows are out of order"
    if row_prev_hash != prev_hash:
        return transfer_id, "prev_hash does not match the previous transfer's hash"
    return transfer_id, "hash does not match the transfer's fields: the row was edited"


def _check_balances(session: Session, report: AuditReport, balances: dict[str, list[int]]) -> None:
    remaining = dict(balances)
    for account in store.scan_accounts(session, AUDIT_PAGE_SIZE):
        stored = account.balance
        replayed = remaining.pop(account.id, [0, 0, 0, 0])
        actual = [stored.debits_pending, stored.debits_posted, stored.credits_pending, stored.credits_posted]
        if replayed != actual:
            report.add("balance", account.id, f"stored {actual} but the transfers give {replayed} "
                       "(debits pending/posted, credits pending/posted)")
    for account_id in remaining:
        report.add("balance", account_id, "transfers name an account that does not exist")


def _check_epochs(session: Session, report: AuditReport, replay: _Replay, epochs: Sequence) -> None:  # type: ignore[type-arg]
    for epoch in epochs:
        report.epochs_checked += 1
        subject = f"epoch {epoch.number}"
        if epoch.last_sequence and replay.hashes.get(epoch.last_sequence) != epoch.last_hash:
            report.add("epoch", subject, f"the journal head recorded at the close (sequence "
                       f"{epoch.last_sequence}) is no longer in the journal")
        payouts = epoch_store.payouts(session, epoch.number)
        for payout in payouts:
            transfer = store.read_transfer(session, payout.transfer_id)
            if transfer is None or (transfer.amount, transfer.debit_account) != (
                    payout.amount, f"operator:{payout.operator_id}"):
                report.add("epoch", payout.transfer_id, f"payout row for {payout.operator_id} does not match "
                           "its transfer")
        tree = epoch_tree(session, epoch.number)
        root = None if tree is None else "0x" + tree.root.hex()
        if root != epoch.root or sum(p.amount for p in payouts) != epoch.total:
            report.add("epoch", subject, f"root or total does not rebuild from the payouts (root {root})")


def _check_queued(session: Session, report: AuditReport, expected_credits: Sequence[ExpectedCredit] | None) -> None:
    """Completions still queued are owed, not lost: each must match its receipt as a posted credit
    would, and none may have been refused by the ledger."""
    expected_by_job = {expected.job_id: expected for expected in expected_credits or ()}
    for row in queue_store.scan_rows(session, AUDIT_PAGE_SIZE):
        report.queued_completions += 1
        subject = f"queued:{row.job_id}"
        if row.failed_code is not None:
            report.add("queued", subject, f"the ledger refused this completion ({row.failed_code}); it is unpaid")
        expected = expected_by_job.get(row.job_id)
        if expected_credits is None:
            continue
        if expected is None:
            report.add("queued", subject, "queued completion has no verified receipt")
            continue
        report.credits_checked += 1
        policy = policy_for_version(row.policy_version)
        price = None if policy is None else price_job(
            expected.parameter_count, expected.prompt_tokens, expected.completion_tokens, policy)
        if price is None or (row.operator_id, row.operator_credit) != (expected.operator_id, price.operator_credit):
            report.add("queued", subject, f"queued {row.operator_credit} for operator:{row.operator_id}; the "
                       f"receipt and policy {row.policy_version} give "
                       f"{'nothing known' if price is None else price.operator_credit} to operator:{expected.operator_id}")


def _check_credits(report: AuditReport, credits: dict[str, list[tuple[str, str, int, str | None]]],
                   expected_credits: Sequence[ExpectedCredit]) -> None:
    expected_by_job = {expected.job_id: expected for expected in expected_credits}
    for job_id, found in credits.items():
        expected = expected_by_job.get(job_id)
        for transfer_id, credit_account, amount, version in found:
            report.credits_checked += 1
            if expected is None:
                report.add("credit", transfer_id, f"credit for job {job_id} has no verified receipt")
                continue
            policy = policy_for_version(version or "")
            if policy is None:
                report.add("credit", transfer_id, f"unknown policy version {version!r}")
                continue
            price = price_job(expected.parameter_count, expected.prompt_tokens, expected.completion_tokens, policy)
            if (credit_account, amount) != (f"operator:{expected.operator_id}", price.operator_credit):
                report.add("credit", transfer_id, f"credited {amount} to {credit_account}; the receipt "
                           f"({expected.prompt_tokens}+{expected.completion_tokens} tokens) and policy {version} "
                           f"give {price.operator_credit} to operator:{expected.operator_id}")
