"""What follows a receipt: held credits, sampling, window release, audits and quarantine.

Real databases (SQLite and PostgreSQL), a fake clock, fixed draws and no MLX: verdicts are
handed in directly, as the verifier worker would write them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.hardware import ChipTier, HardwareReport
from contracts.ids import JobId, OperatorId
from contracts.models import ModelSpec
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from coordinator.config import CoordinatorConfig
from coordinator.jobs.submission import Submission
from coordinator.model import JobStatus, TokenChunk
from coordinator.money import api_keys
from coordinator.money.api_keys import Caller, KeyLimits
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows, node_rows
from coordinator.storage.database import Database, upgrade_schema
from coordinator.verification import outcomes
from coordinator.verification.economics import StakePolicy
from coordinator.verification.judge import CheckVerdict
from coordinator.verification.peers import PeerCheckPolicy
from coordinator.verification.policy import TrustPolicy
from coordinator.verification.store import CheckStatus, CreditState
from ledger.book import balance
from ledger.jobs import (
    consumer_account_id,
    deposit_for_consumer,
    open_consumer_account,
    operator_account_id,
)
from node_agent.identity import Identity, load_or_create_identity
from tests.proof_helpers import well_formed_commitment
from tests.node_registration import register_node

GIB = 1 << 30
MODEL = ModelSpec(model_id="small", weights_bytes=GIB, parameter_count=500_000_000, num_layers=8,
                  num_attention_heads=8, num_kv_heads=8, head_dim=64, max_context_tokens=4096,
                  weights_digest="cd" * 32, vocab_size=32_000)
HARDWARE = HardwareReport(chip="Apple M4 Max", chip_family="M4", chip_tier=ChipTier.MAX,
                          memory_bytes=64 * GIB, gpu_working_set_bytes=48 * GIB, gpu_cores=40,
                          memory_bandwidth_gb_s=546.0, os_name="macOS", simulated=True)
WINDOW_S = 600
# New nodes are not checked at rate 1 here, so a draw decides: 0.5 skips, 0.0 samples. The stake
# neither raises the rate nor is taken here: tests/coordinator/verification/test_stakes.py checks it.
NO_STAKE = StakePolicy(work_cost_share_max=0.0, checks_per_window_min=0.0, stake_share=0.0, clawback_share=0.0)
POLICY = TrustPolicy(new_node_checks=0, prior_cheat_chance=1e-6, rate_min=0.01, check_window_s=WINDOW_S,
                     stake=NO_STAKE)


class FakeClock:
    def __init__(self) -> None:
        self.ms = 1_800_000_000_000

    def now_ms(self) -> int:
        return self.ms


class FixedDraws:
    def __init__(self) -> None:
        self.next = 0.5

    def random(self) -> float:
        return self.next

    def randrange(self, stop: int) -> int:  # a checker's draw (verification/checker_pool.py)
        return int(self.next * stop)


class HoldsTheModel:
    """A replayer that is never asked to replay: verdicts come from the test."""

    def held_models(self) -> frozenset[tuple[str, str]]:
        return frozenset({(MODEL.model_id, MODEL.weights_digest)})


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    upgrade_schema(database_url)
    db = Database(database_url)
    config = CoordinatorConfig(database_url=database_url, trust=POLICY)
    yield CoordinatorService(db, FakeClock(), config, draws=FixedDraws())  # type: ignore[arg-type]
    db.dispose()


def _register(service: CoordinatorService, identity: Identity, operator: str) -> str:
    node_id, _ = register_node(service, identity, HARDWARE, (MODEL,), operator, display_name=operator,
                               max_concurrent_jobs=4)
    return node_id


def _complete(service: CoordinatorService, identity: Identity, draw: float,
              caller: Caller | None = None) -> str:
    """Submit a job, have the node it lands on (identity's) stream and sign for it."""
    service.core.draws.next = draw  # type: ignore[attr-defined]
    job = service.jobs.submit(Submission(consumer_id=caller.consumer_id if caller else "c",
                                        model_id=MODEL.model_id, prompt="Hello",
                                        max_tokens=8, temperature=0.0, top_p=1.0, seed=0,
                                        request_id="", min_decode_tokens_per_s=0.0,
                                        api_key_id=caller.key.key_id if caller and caller.key else None),
                             caller).job
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, identity.node_id)
        assert node is not None and job_rows.job_by_id(session, job.job_id).node_ids == (node.node_id,)  # type: ignore[union-attr]
    tokens = (5, 6, 7)
    service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, tokens, "abc"), prompt_tokens=2)
    now = service.clock.now_ms()
    receipt = Receipt(JobId(job.job_id), identity.node_id, MODEL.model_id, MODEL.weights_digest,
                      prompt_digest("Hello"), 0.0, 1.0, 0, 8, output_digest(tokens), 2, 3, now, now,
                      well_formed_commitment(3), FinishReason.END_TOKEN, now)
    body = encode_receipt(receipt)
    service.nodes.accept_receipt(node, job.job_id, body, identity.sign(body))
    return job.job_id


def _posted(service: CoordinatorService, operator: str) -> int:
    with service.db.transaction() as session:
        found = balance(session, operator_account_id(OperatorId(operator)))
        return found.net_posted if found else 0


def _verdict(service: CoordinatorService, job_id: str, passed: bool) -> outcomes.VerdictOutcome | None:
    verdict = CheckVerdict(passed, () if passed else ("tokens 0-2: forged",))
    with service.db.transaction() as session:
        return outcomes.record_verdict(session, job_id, verdict, "test-verifier", POLICY,
                                       service.clock.now_ms())


def test_an_unsampled_jobs_credit_is_held_until_its_window_closes(service: CoordinatorService,
                                                                   tmp_path: Path) -> None:
    service.checks.attach_verifier(HoldsTheModel())  # type: ignore[arg-type]  # it could be checked
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _register(service, alice, "alice")
    job_id = _complete(service, alice, draw=0.5)
    check = service.checks.of_job(job_id)
    assert check is not None and check.status is CheckStatus.UNCHECKED and not check.sampled
    assert check.reason == "not sampled (check rate 0.010)" and check.credit_state is CreditState.PENDING
    assert service.money.release_due_credits() == [] and _posted(service, "alice") == 0
    service.clock.ms += WINDOW_S * 1000  # type: ignore[attr-defined]
    assert service.money.release_due_credits() == [job_id]
    assert _posted(service, "alice") == check.operator_credit > 0
    assert service.checks.of_job(job_id).credit_state is CreditState.POSTED  # type: ignore[union-attr]
    assert service.money.release_due_credits() == []


def test_a_sampled_job_the_coordinator_cannot_replay_goes_to_peers_and_stays_held(
        service: CoordinatorService, tmp_path: Path) -> None:
    """Issue 32: "cannot check" is not "paid". With no other operator's node serving the model
    the check waits for a peer, says why, and the credit is not released at the window's close,
    only after the longer hold, when no peer ever came."""
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _register(service, alice, "alice")
    job_id = _complete(service, alice, draw=0.0)
    check = service.checks.of_job(job_id)
    assert check is not None and check.sampled and check.status is CheckStatus.WAITING
    assert check.reason is not None and "no checker for small yet" in check.reason
    assert check.hold_until_ms - check.completed_at_ms == POLICY.stake.unverifiable_hold_s * 1000
    service.peers.dispatch()
    check = service.checks.of_job(job_id)
    assert check is not None and check.status is CheckStatus.PEER
    assert check.reason is not None and "no peer can check small" in check.reason
    assert "1 the checked node" in check.reason
    service.clock.ms += WINDOW_S * 1000  # type: ignore[attr-defined]
    assert service.money.release_due_credits() == [] and _posted(service, "alice") == 0
    assert service.checks.of_job(job_id).credit_state is CreditState.PENDING  # type: ignore[union-attr]
    service.clock.ms = check.hold_until_ms  # type: ignore[attr-defined]
    assert service.money.release_due_credits() == [job_id]  # the longer hold ended; no peer ever came
    check = service.checks.of_job(job_id)
    assert check is not None and check.status is CheckStatus.AWAITING_CHECKER
    assert "no peer took it" in (check.reason or "") and _posted(service, "alice") == check.operator_credit > 0
    service.peers.dispatch()  # the peer check is over: nothing is sent for it any more
    assert service.checks.of_job(job_id).status is CheckStatus.AWAITING_CHECKER  # type: ignore[union-attr]


def test_with_peer_checks_off_a_sampled_job_nobody_can_check_is_held_longer_and_says_why(
        database_url: str, tmp_path: Path) -> None:
    upgrade_schema(database_url)
    config = CoordinatorConfig(database_url=database_url, trust=POLICY, peer_checks=PeerCheckPolicy(enabled=False))
    service = CoordinatorService(Database(database_url), FakeClock(), config, draws=FixedDraws())  # type: ignore[arg-type]
    try:
        alice = load_or_create_identity(tmp_path / "alice.pem")
        _register(service, alice, "alice")
        job_id = _complete(service, alice, draw=0.0)
        check = service.checks.of_job(job_id)
        assert check is not None and check.sampled and check.status is CheckStatus.AWAITING_CHECKER
        assert check.reason is not None and "no checker for small yet" in check.reason
        assert "held 72 h, not 0.166667 h" in check.reason and check.credit_state is CreditState.PENDING
        service.clock.ms += WINDOW_S * 1000  # type: ignore[attr-defined]
        assert service.money.release_due_credits() == [] and _posted(service, "alice") == 0  # not "paid"
        service.clock.ms = check.hold_until_ms  # type: ignore[attr-defined]
        assert service.money.release_due_credits() == [job_id]  # the longer hold ended, no checker came
        assert _posted(service, "alice") == check.operator_credit > 0
    finally:
        service.db.dispose()


def test_an_unsampled_job_nobody_can_check_is_held_longer(service: CoordinatorService,
                                                          tmp_path: Path) -> None:
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _register(service, alice, "alice")
    job_id = _complete(service, alice, draw=0.5)
    check = service.checks.of_job(job_id)
    assert check is not None and check.status is CheckStatus.UNCHECKED and not check.sampled
    assert check.hold_until_ms - check.completed_at_ms == POLICY.stake.unverifiable_hold_s * 1000
    assert "no checker for small yet" in (check.reason or "")
    service.clock.ms += WINDOW_S * 1000  # type: ignore[attr-defined]
    assert service.money.release_due_credits() == []


def test_a_job_peers_can_check_is_held_for_the_window_only(service: CoordinatorService,
                                                           tmp_path: Path) -> None:
    service.core.peer_checkable = lambda session: frozenset({(MODEL.model_id, MODEL.weights_digest)})
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _register(service, alice, "alice")
    sampled = service.checks.of_job(_complete(service, alice, draw=0.0))
    assert sampled is not None and sampled.status is CheckStatus.WAITING and sampled.reason is None
    assert sampled.hold_until_ms - sampled.completed_at_ms == WINDOW_S * 1000


def test_a_failed_check_voids_audits_reruns_and_is_applied_once(service: CoordinatorService,
                                                                tmp_path: Path) -> None:
    service.checks.attach_verifier(HoldsTheModel())  # type: ignore[arg-type]
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _register(service, mallory, "mallory")
    unsampled = _complete(service, mallory, draw=0.5)
    sampled = _complete(service, mallory, draw=0.0)
    assert service.checks.of_job(sampled).status is CheckStatus.WAITING  # type: ignore[union-attr]
    outcome = _verdict(service, sampled, passed=False)
    assert outcome is not None and not outcome.passed and outcome.audited_job_ids == (unsampled,)
    assert _verdict(service, sampled, passed=True) is None  # decided once, never again
    check = service.checks.of_job(sampled)
    assert check is not None and check.status is CheckStatus.FAILED
    assert check.credit_state is CreditState.VOIDED and check.reason == "tokens 0-2: forged"
    audited = service.checks.of_job(unsampled)
    assert audited is not None and audited.status is CheckStatus.WAITING  # checked before it is paid
    service.clock.ms += WINDOW_S * 1000  # type: ignore[attr-defined]
    assert service.money.release_due_credits() == []  # a waiting audit is never released unchecked
    with service.db.transaction() as session:
        rerun = job_rows.job_by_id(session, check.rerun_job_id)  # type: ignore[arg-type]
    assert rerun is not None and rerun.prompt == "Hello" and rerun.reserved_base_units == 0
    assert _posted(service, "mallory") == 0


def test_a_rerun_skips_the_node_that_failed_it_by_a_named_filter_on_the_live_index(
        service: CoordinatorService, tmp_path: Path) -> None:
    service.checks.attach_verifier(HoldsTheModel())  # type: ignore[arg-type]
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _register(service, mallory, "mallory")
    sampled = _complete(service, mallory, draw=0.0)
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _register(service, alice, "alice")
    service.run_scheduler()  # the index learns alice
    builds = service.fleet.index_builds
    outcome = _verdict(service, sampled, passed=False)
    assert outcome is not None and not outcome.quarantined  # mallory is still placeable, but not for this job
    service.run_scheduler()
    check = service.checks.of_job(sampled)
    with service.db.transaction() as session:
        rerun = job_rows.job_by_id(session, check.rerun_job_id)  # type: ignore[arg-type, union-attr]
    assert rerun is not None and rerun.status is JobStatus.ASSIGNED and rerun.node_ids == (alice.node_id,)
    explained = json.loads(rerun.explanation_json or "{}")
    assert explained["macs"]["filtered"] == {"failed_this_job": 1}
    assert service.fleet.index_builds == builds  # no index was built for the re-run


def test_repeat_offenders_are_quarantined_and_never_placed(service: CoordinatorService,
                                                          tmp_path: Path) -> None:
    service.checks.attach_verifier(HoldsTheModel())  # type: ignore[arg-type]
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _register(service, mallory, "mallory")
    first, second = (_complete(service, mallory, draw=0.0) for _ in range(2))
    assert not _verdict(service, first, passed=False).quarantined  # type: ignore[union-attr]
    assert _verdict(service, second, passed=False).quarantined  # type: ignore[union-attr]
    trust, history = service.checks.of_node(mallory.node_id)
    assert trust.quarantined_at_ms is not None and "failed 2 checks" in (trust.quarantine_reason or "")
    assert [c.status for c in history] == [CheckStatus.FAILED, CheckStatus.FAILED]
    alice = load_or_create_identity(tmp_path / "alice.pem")
    _register(service, alice, "alice")
    service.run_scheduler()
    with service.db.transaction() as session:
        placed = [job_rows.job_by_id(session, c.rerun_job_id) for c in history]  # type: ignore[arg-type]
    assert all(job is not None and job.status is JobStatus.ASSIGNED and job.node_ids == (alice.node_id,)
               for job in placed)


def test_a_paying_consumer_is_charged_nothing_for_a_job_that_failed_its_check(
        service: CoordinatorService, tmp_path: Path) -> None:
    service.checks.attach_verifier(HoldsTheModel())  # type: ignore[arg-type]
    with service.db.transaction() as session:
        key, _ = api_keys.create_key(session, "carol", KeyLimits(), "test", service.clock.now_ms())
        open_consumer_account(session, "carol")  # type: ignore[arg-type]
        deposit_for_consumer(session, "carol-deposit-1", "carol", 10**12)  # type: ignore[arg-type]
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _register(service, mallory, "mallory")
    job_id = _complete(service, mallory, draw=0.0, caller=Caller("carol", key))

    def carol() -> tuple[int, int]:
        with service.db.transaction() as session:
            found = balance(session, consumer_account_id("carol"))  # type: ignore[arg-type]
            spent = api_keys.keys_of(session, "carol")[0].spent_base_units
        assert found is not None
        return found.net_posted, spent

    service.money.post_completions()  # the postings loop's pass: the receipt queued the charge
    charged_balance, charged_spend = carol()
    assert charged_balance < 10**12 and charged_spend > 0  # the job was charged at completion
    assert not _verdict(service, job_id, passed=False).passed  # type: ignore[union-attr]
    assert carol() == (10**12, 0)
    assert _posted(service, "mallory") == 0
