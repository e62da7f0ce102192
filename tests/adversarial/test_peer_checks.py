"""A peer's check gives the coordinator's own verdict: every cheat the verifier's replay catches, a
peer's signed result (node_agent/peer_checks.py) catches on the same job, and honest jobs pass.

The checker runs the real MLX model (node_agent.peer_checks.run_check); the coordinator side
judges its decoded, signature-checked result with no model at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.peer_checks import CheckJob, decode_result, signing_bytes
from contracts.receipts import Receipt, decode_receipt
from contracts.signing import signature_is_valid
from contracts.token_checks import TokenSlack
from coordinator.jobs.receipt_check import ExpectedJob, check_receipt
from coordinator.verification.judge import CheckVerdict, ReplayFacts, judge
from coordinator.verification.tolerances import DEFAULT_TOLERANCES
from node_agent.inference.engine import Engine
from node_agent.peer_checks import run_check
from tests.adversarial.cheats import CHEAT_JOBS, CHEATS, CheatContext
from tests.adversarial.harness import MODEL_ID, Coordinator, HonestNode, Job, Report, new_identity
from tests.adversarial.test_cheats import DOOR

CHECKER = new_identity()


def peer_verdict(engine: Engine, model_dir: Path, receipt: Receipt, job: Job, streamed: tuple[int, ...]) -> CheckVerdict:
    """What the coordinator decides from a peer's signed result on this job."""
    tolerances = DEFAULT_TOLERANCES
    check = CheckJob(f"pc-{job.job_id}", job.job_id, MODEL_ID, receipt.weights_digest, job.prompt,
                     streamed[:receipt.completion_tokens], receipt.finish_reason, job.temperature, job.top_p,
                     job.seed, TokenSlack(tolerances.logit_slack, tolerances.mass_slack))
    body, signature = run_check(engine, str(model_dir), check, CHECKER)
    assert signature_is_valid(CHECKER.public_key_raw, signing_bytes(body), signature)
    result = decode_result(body)
    assert (result.check_id, result.job_id, result.checker_node_id) == (check.check_id, job.job_id, CHECKER.node_id)
    facts = ReplayFacts(result.prompt_tokens, result.prompt, result.generated, result.token_checks)
    return judge(receipt, facts, tolerances)


def _door(checks: Coordinator, job: Job, assigned, report: Report) -> Receipt | None:  # type: ignore[no-untyped-def]
    expected = ExpectedJob(job_id=job.job_id, node_id=assigned.node_id, model_id=MODEL_ID,
                           weights_digest=checks.spec.weights_digest, prompt=job.prompt,
                           temperature=job.temperature, top_p=job.top_p, seed=job.seed,
                           max_tokens=job.max_tokens, streamed_token_ids=report.streamed)
    door = check_receipt(report.body, report.signature, assigned.public_key_raw, expected)
    return door.receipt if door.ok else None


@pytest.fixture(scope="module")
def context(proof_engine: Engine, tiny_model_dir: Path, cheat_model_dirs: dict[str, Path],
            checks: Coordinator) -> CheatContext:
    return CheatContext(proof_engine, tiny_model_dir, cheat_model_dirs, new_identity(),
                        HonestNode(proof_engine, tiny_model_dir), checks.spec.weights_digest)


@pytest.mark.parametrize("name", sorted(set(CHEATS) - DOOR))
def test_a_peer_catches_every_cheat_the_verifier_catches(name: str, context: CheatContext,
                                                         checks: Coordinator) -> None:
    for job in CHEAT_JOBS[:3]:
        report = CHEATS[name](context, job)
        receipt = _door(checks, job, context.cheater, report)
        assert receipt is not None, f"{name} is stopped at the door, not by a replay"
        verdict = peer_verdict(context.engine, context.honest_dir, receipt, job, report.streamed)
        assert not verdict.passed and verdict.reasons, f"{name} passed a peer's check on {job}"
        own = checks.judge(job, context.cheater, report).verdict
        assert own is not None and own.reasons == verdict.reasons  # the same evidence, word for word


def test_honest_jobs_pass_a_peers_check(context: CheatContext, checks: Coordinator) -> None:
    honest = HonestNode(context.engine, context.honest_dir, context.cheater)
    for job in CHEAT_JOBS:
        report, _ = honest.run(job)
        receipt = decode_receipt(report.body)
        verdict = peer_verdict(context.engine, context.honest_dir, receipt, job, report.streamed)
        assert verdict.passed, verdict.reasons


def test_a_checker_with_other_weights_disputes_honest_work(context: CheatContext) -> None:
    """What a lying (or broken) checker reports: the dispute path's referee then decides."""
    honest = HonestNode(context.engine, context.honest_dir, context.cheater)
    job = CHEAT_JOBS[0]
    report, _ = honest.run(job)
    verdict = peer_verdict(context.engine, context.cheat_dirs["other-seed"], decode_receipt(report.body), job,
                           report.streamed)
    assert not verdict.passed
