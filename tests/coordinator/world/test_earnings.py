"""An operator's money, pure: pay per job, earnings per epoch, and proof JSON."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from coordinator.world.earnings import (
    LEAF_ENCODING, ChainRoot, CheckFacts, EpochEarnings, PayState, earnings_json, epoch_earnings, job_pay, money,
    proof_json,
)
from ledger.merkle import PayoutLeaf, build_tree, leaf_hash, verify_proof
from ledger.model import Transfer, TransferKind, TransferState

OPERATOR = "operator:alice"
OTHER = "operator:bob"
_sequence = itertools.count(1)


def _transfer(id: str, amount: int, *, debit: str = "issuance:rewards", credit: str = OPERATOR,
              state: TransferState = TransferState.POSTED, kind: TransferKind = TransferKind.JOB_OPERATOR_CREDIT,
              pending_id: str | None = None, job_id: str | None = "job-1") -> Transfer:
    return Transfer(sequence=next(_sequence), id=id, debit_account=debit, credit_account=credit, amount=amount,
                    state=state, pending_id=pending_id, timeout_s=0, job_id=job_id, kind=kind,
                    policy_version="v1", created_at_us=1, prev_hash="0" * 64, hash="1" * 64)


def test_a_posted_credit_is_paid() -> None:
    pay = job_pay("job-1", "completed", None, True, [_transfer("job-1:credit", 500)], OPERATOR)
    assert (pay.state, pay.amount) == (PayState.PAID, 500)


def test_a_held_credit_then_its_resolutions() -> None:
    held = _transfer("job-1:credit", 500, state=TransferState.PENDING, debit="escrow:consumers")
    assert job_pay("job-1", "completed", None, True, [held], OPERATOR).state is PayState.HELD
    released = _transfer("job-1:release", 500, pending_id="job-1:credit")
    assert job_pay("job-1", "completed", None, True, [held, released], OPERATOR).state is PayState.PAID
    voided = _transfer("job-1:reject", 500, state=TransferState.VOIDED, pending_id="job-1:credit")
    rejected = job_pay("job-1", "completed", "tokens differ from the replay", True, [held, voided], OPERATOR)
    assert rejected.state is PayState.REJECTED and "tokens differ from the replay" in rejected.reason
    expired = _transfer("job-1:expire", 500, state=TransferState.EXPIRED, pending_id="job-1:credit")
    assert job_pay("job-1", "completed", None, True, [held, expired], OPERATOR).state is PayState.EXPIRED


def test_the_check_says_why_pay_is_held_released_or_refused() -> None:
    held = _transfer("job-1:credit", 500, state=TransferState.PENDING, debit="escrow:consumers")
    waiting = CheckFacts("waiting", True, None, 99, None)
    assert "sampled for a replay check" in job_pay("job-1", "completed", None, True, [held], OPERATOR,
                                                    waiting).reason
    unchecked = CheckFacts("unchecked", False, "not sampled (rate 3%)", 99, None)
    assert "not sampled (rate 3%)" in job_pay("job-1", "completed", None, True, [held], OPERATOR, unchecked).reason
    released = _transfer("job-1:release", 500, pending_id="job-1:credit")
    passed = CheckFacts("passed", True, None, 99, 50)
    assert "passed its replay check" in job_pay("job-1", "completed", None, True, [held, released], OPERATOR,
                                                passed).reason
    voided = _transfer("job-1:reject", 500, state=TransferState.VOIDED, pending_id="job-1:credit")
    failed = CheckFacts("failed", True, "token 3: the replay would not pick 812", 99, 50)
    refused = job_pay("job-1", "completed", None, True, [held, voided], OPERATOR, failed)
    assert refused.state is PayState.REJECTED and "would not pick 812" in refused.reason


def test_held_longer_escalated_and_forfeited_credits_say_so() -> None:
    held = _transfer("job-1:credit", 500, state=TransferState.PENDING, debit="escrow:consumers")
    no_checker = "no checker for m yet (no node of another operator serves these weights): held 72 h, not 1 h"
    waiting = job_pay("job-1", "completed", None, True, [held], OPERATOR,
                      CheckFacts("awaiting_checker", True, f"sampled, but {no_checker}", 99, None))
    assert waiting.state is PayState.HELD and "waiting for a checker" in waiting.reason and "72 h" in waiting.reason
    escalated = job_pay("job-1", "completed", None, True, [held], OPERATOR,
                        CheckFacts("quarantined", True, "escalated: the replay child died", 99, 50))
    assert escalated.state is PayState.HELD and "another checker decides" in escalated.reason
    released = _transfer("job-1:release", 500, pending_id="job-1:credit")
    late = job_pay("job-1", "completed", None, True, [held, released], OPERATOR,
                   CheckFacts("unchecked", False, f"not sampled (check rate 0.020); {no_checker}", 99, None))
    assert late.state is PayState.PAID and late.reason.startswith("released after the longer hold: not sampled")
    voided = _transfer("job-1:reject", 500, state=TransferState.VOIDED, pending_id="job-1:credit")
    forfeited = job_pay("job-1", "completed", None, True, [held, voided], OPERATOR, CheckFacts(
        "forfeited", False, "forfeited as stake: node n failed the check of job j (50% of its held credits are "
        "voided); the consumer was refunded", 99, None))
    assert forfeited.state is PayState.REJECTED and forfeited.reason.startswith("not paid: forfeited as stake")


def test_unpaid_jobs_say_why() -> None:
    assert "failed (node x: out of memory)" in job_pay("job-1", "failed", "node x: out of memory", False, [],
                                                      OPERATOR).reason
    assert "is running" in job_pay("job-1", "running", None, False, [], OPERATOR).reason
    assert "did not verify" in job_pay("job-1", "completed", None, False, [], OPERATOR).reason
    assert "priced at zero" in job_pay("job-1", "completed", None, True, [], OPERATOR).reason


def test_another_operators_credit_is_not_this_operators_pay() -> None:
    pay = job_pay("job-1", "completed", None, True, [_transfer("job-1:credit", 500, credit=OTHER)], OPERATOR)
    assert (pay.state, pay.amount) == (PayState.UNPAID, 0)


def test_epoch_earnings_put_every_transfer_in_one_bucket() -> None:
    transfers = [
        _transfer("a", 100),
        _transfer("b", 7, kind=TransferKind.SEAT_REWARD, debit="pool:bonus", job_id=None),
        _transfer("c", 3, kind=TransferKind.SEAT_JOB_BONUS, debit="pool:bonus", job_id=None),
        _transfer("d", 50, state=TransferState.PENDING, debit="escrow:consumers"),
        _transfer("e", 20, state=TransferState.VOIDED, debit="escrow:consumers", pending_id="x"),
        _transfer("f", 110, debit=OPERATOR, credit="payouts:onchain", kind=TransferKind.EPOCH_PAYOUT, job_id=None),
        _transfer("g", 1, debit=OPERATOR, credit="treasury:fees", kind=TransferKind.CORRECTION, job_id=None),
        _transfer("h", 999, credit=OTHER),  # someone else's: ignored
    ]
    earnings = epoch_earnings(transfers, OPERATOR)
    assert earnings == EpochEarnings(jobs=100, seat_reward=7, seat_bonus=3, held=50, rejected=20, paid_out=110,
                                     other_debits=1)
    assert earnings.earned == 110
    assert earnings_json(earnings)["seat_bonus"] == {"base_units": "3", "mlx": "0.000000003 MLX"}


def test_a_credit_held_and_released_in_one_window_counts_once() -> None:
    held = _transfer("job-1:credit", 500, state=TransferState.PENDING, debit="escrow:consumers")
    released = _transfer("job-1:release", 500, pending_id="job-1:credit", debit="escrow:consumers")
    assert epoch_earnings([held, released], OPERATOR) == EpochEarnings(jobs=500)
    assert epoch_earnings([held], OPERATOR) == EpochEarnings(held=500)  # still held at the window's end
    assert epoch_earnings([released], OPERATOR) == EpochEarnings(jobs=500)  # held in an earlier window


@given(st.lists(st.tuples(st.sampled_from(list(TransferKind)), st.integers(1, 10**12),
                          st.sampled_from([OPERATOR, OTHER]), st.sampled_from([OPERATOR, OTHER, "pool:bonus"])),
                max_size=30))
def test_credits_to_the_operator_are_counted_once(rows: list[tuple[TransferKind, int, str, str]]) -> None:
    transfers = [_transfer(f"t{i}", amount, credit=credit, debit=debit, kind=kind)
                 for i, (kind, amount, credit, debit) in enumerate(rows) if credit != debit]
    earnings = epoch_earnings(transfers, OPERATOR)
    credited = sum(t.amount for t in transfers if t.credit_account == OPERATOR)
    debited = sum(t.amount for t in transfers if t.debit_account == OPERATOR)
    assert earnings.jobs + earnings.seat_reward + earnings.seat_bonus + earnings.held + earnings.rejected == credited
    assert earnings.paid_out + earnings.other_debits == debited


def test_proof_json_carries_what_the_browser_needs_and_it_verifies() -> None:
    leaves = [PayoutLeaf(5, "0x" + f"{i:040x}", 1_000 + i) for i in range(1, 6)]
    tree = build_tree(leaves)
    leaf = leaves[2]
    data = proof_json(leaf, tree.proof(leaf), ChainRoot("0x" + tree.root.hex(), "anchor", 61, "0xd", "0xt", 9))
    assert data["leaf"] == "0x" + leaf_hash(leaf).hex()
    assert data["leaf_encoding"] == LEAF_ENCODING and data["hash"] == "keccak256"
    assert data["amount"] == money(1_003)
    assert (data["root_source"], data["chain_id"], data["block_number"]) == ("anchor", 61, 9)
    siblings = [bytes.fromhex(p[2:]) for p in data["proof"]]  # type: ignore[union-attr]
    assert verify_proof(leaf, siblings, tree.root)
