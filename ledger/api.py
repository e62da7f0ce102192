"""The ledger's public API: what the coordinator, the CLI and the benchmarks call.

Everything here takes the caller's SQLAlchemy Session and never commits, so a job's state
and its money move in one transaction. Expected outcomes are values (ResultCode, JobPayment,
EpochClose); real failures raise LedgerError. The names below are re-exported from the
modules that own them (see the map in ledger/__init__.py); callers outside the ledger import
this module only, so the ledger can move its insides without touching them.

    accounts and balances   ensure/open accounts, balance, deposit, lock_ledger
    a job's money           reserve, complete (held credit), settle, void, release, reject,
                            a completion queued by a receipt and posted in group commits (post_queued),
                            and a peer's fee for checking it (pay_check_fee)
    claw-backs              claw_back (balance first, a debt for the rest), repay_debt, operator_debt
    epochs                  close, payout addresses, epoch and payout reads, payout trees
    reads for the pages     transfers of a job or an account's window, seat results, anchors
    audits and proofs       audit (with signed heads and kept statements), operator statements
                            (signed_statement), proof bundles
    the payout chain        anchor_epochs/anchor_pass, embedded_chain (an anvil process), connect_chain,
                            in_process_chain (eth-tester, for tests); web3 loads lazily;
                            chain_settings (flags checked), publisher_key (env or keystore)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger.anchoring import AnchorMismatchError, AnchorPass, PayoutChainLike, anchor_epochs, anchor_pass, check_anchors
from ledger.anvil import AnvilProcess, anvil_binary, embedded_chain
from ledger.book import (
    JobStep,
    balance,
    chain_head,
    get_transfer,
    job_transfer_id,
    lock_ledger,
    pending_state,
    transfers_for_job,
)
from ledger.clawbacks import ClawBack, claw_back, clawback_split, debt_repayment, operator_debt, repay_debt
from ledger.epochs import (
    EPOCH_LENGTH_S_DEFAULT,
    EpochClose,
    EpochCode,
    close_epoch,
    due_epoch,
    epoch_tree,
    set_payout_address,
)
from ledger.chain_settings import (
    CONFIRMATIONS_MAX,
    KEYSTORE_PASSWORD_ENV_DEFAULT,
    PUBLISHER_KEY_ENV_DEFAULT,
    ChainSettings,
    GasCaps,
    chain_settings,
    deploy_settings,
)
from ledger.errors import ChainError, ChainSettingsError, LedgerError, LedgerNotInstalledError
from ledger.full_audit import AuditReport, Difference, ExpectedCredit, audit
from ledger.head_signatures import HeadSigner, head_message, signature_valid
from ledger.job_batches import (
    JOBS_PER_CALL_MAX,
    JobCompletion,
    JobReservation,
    complete_jobs,
    release_job_credits,
    reserve_jobs,
)
from ledger.jobs import (
    JobPayment,
    complete_job,
    consumer_account_id,
    deposit_for_consumer,
    check_fee_transfer_id,
    ensure_system_accounts,
    open_consumer_account,
    open_operator_account,
    operator_account_id,
    pay_check_fee,
    reject_job_credit,
    release_job_credit,
    reserve_job,
    settle_job,
    void_job,
)
from ledger.posting_queue import (
    QUEUE_BATCH_MAX,
    PostedQueue,
    QueuedCompletion,
    QueueState,
    post_queued,
    queue_completion,
    queue_state,
    queued_problems,
)
from ledger.merkle import PayoutLeaf, PayoutTree, build_tree, leaf_hash, verify_proof
from ledger.model import (
    AccountKind,
    Balance,
    ChainHead,
    ResultCode,
    Transfer,
    TransferKind,
    TransferResult,
    TransferState,
)
from ledger.policy import JobPrice, max_job_charge, network_fee_floor, price_job
from ledger.rules import valid_id
from ledger.seats import SeatInput, SeatOutcome, availability_bps
from ledger.statements import (
    Statement,
    bundle_root,
    leaf_from_bundle,
    operator_statement,
    signed_statement,
    statement_problem,
)
from ledger.storage.epoch_store import (
    AnchorRecord,
    EpochRecord,
    PayoutRecord,
    anchors_of_epoch,
    epochs_progress,
    last_epoch,
    payout_address,
    previous_epoch,
    read_epoch,
    seat_outcomes,
    transfers_in_window,
)
from ledger.storage.epoch_store import payouts as epoch_payouts
from ledger.storage.store import operator_credit_totals
from ledger.storage.tables import metadata
from ledger.units import BASE_UNITS_PER_MLX, format_mlx, parse_mlx

if TYPE_CHECKING:
    from ledger.anchor import PayoutChain

__all__ = [
    "BASE_UNITS_PER_MLX", "CONFIRMATIONS_MAX", "EPOCH_LENGTH_S_DEFAULT", "JOBS_PER_CALL_MAX",
    "KEYSTORE_PASSWORD_ENV_DEFAULT", "PUBLISHER_KEY_ENV_DEFAULT",
    "AccountKind", "AnchorMismatchError", "ClawBack", "AnchorPass", "ChainSettings", "ChainSettingsError", "GasCaps",
    "anchor_pass", "chain_settings", "deploy_chain", "deploy_settings", "publisher_key", "AnvilProcess", "AnchorRecord", "AuditReport", "Balance", "ChainError", "ChainHead",
    "Difference", "EpochClose", "EpochCode", "EpochRecord", "ExpectedCredit", "HeadSigner", "JobCompletion",
    "JobPayment",
    "JobPrice", "JobReservation", "JobStep", "LedgerError", "LedgerNotInstalledError", "PayoutChainLike",
    "PayoutLeaf", "PayoutRecord", "PayoutTree", "ResultCode", "SeatInput", "SeatOutcome", "Statement", "Transfer",
    "TransferKind", "TransferResult", "TransferState",
    "anchor_epochs", "anchors_of_epoch", "anvil_binary", "audit", "availability_bps", "balance", "build_tree", "bundle_root",
    "chain_head", "check_anchors", "check_fee_transfer_id", "claw_back", "clawback_split", "debt_repayment", "close_epoch", "complete_job", "complete_jobs", "connect_chain",
    "consumer_account_id", "deposit_for_consumer", "due_epoch", "embedded_chain", "ensure_system_accounts", "epoch_payouts",
    "epoch_tree", "epochs_progress", "format_mlx", "get_transfer", "head_message", "in_process_chain",
    "job_transfer_id",
    "last_epoch", "leaf_from_bundle", "leaf_hash", "lock_ledger", "max_job_charge", "metadata", "network_fee_floor",
    "open_consumer_account", "open_operator_account", "operator_account_id", "operator_credit_totals",
    "operator_debt", "operator_statement", "parse_mlx", "pay_check_fee", "payout_address", "pending_state", "previous_epoch", "price_job",
    "read_epoch", "reject_job_credit", "repay_debt", "release_job_credit", "release_job_credits", "reserve_job",
    "reserve_jobs", "seat_outcomes", "set_payout_address", "settle_job", "signature_valid", "signed_statement",
    "statement_problem", "transfers_for_job",
    "transfers_in_window", "valid_id", "verify_proof", "void_job",
    "QUEUE_BATCH_MAX", "PostedQueue", "QueuedCompletion", "QueueState", "post_queued", "queue_completion", "queue_state",
    "queued_problems",
]


def in_process_chain() -> PayoutChain:
    """A fresh eth-tester chain with the contracts deployed, living as long as this process."""
    from ledger.anchor import PayoutChain as Chain  # web3 loads only when a chain is used

    return Chain.in_process()


def connect_chain(rpc_url: str, distributor_address: str, private_key: str | None = None, *,
                  chain_id: int | None = None, gas: GasCaps = GasCaps(),
                  receipt_timeout_s: float = 120.0) -> PayoutChain:
    """The deployed distributor at a JSON-RPC URL; ChainError when it cannot be used, ChainSettingsError
    when the node serves another chain than chain_id or has no distributor there."""
    from ledger.anchor import PayoutChain as Chain  # web3 loads only when a chain is used

    return Chain.connect(rpc_url, distributor_address, private_key, chain_id=chain_id, gas=gas,
                         receipt_timeout_s=receipt_timeout_s)


def deploy_chain(settings: ChainSettings, private_key: str) -> PayoutChain:
    """Deploy the token and the distributor on a real network from the publisher's key."""
    from ledger.anchor import PayoutChain as Chain  # web3 loads only when a chain is used

    assert settings.rpc_url is not None
    return Chain.deploy(settings.rpc_url, private_key, chain_id=settings.chain_id, gas=settings.gas,
                        receipt_timeout_s=settings.receipt_timeout_s)


def publisher_key(settings: ChainSettings) -> str | None:
    """The publisher's key from its environment variable or keystore (None for the own anvil)."""
    from ledger.publisher_key import publisher_key as load  # eth-account loads only for a real network

    return load(settings)
