"""Every cheating node is caught, on every job: at the door (receipt refused) or by the replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.inference.engine import Engine
from tests.adversarial.cheats import CHEAT_JOBS, CHEATS, CheatContext
from tests.adversarial.harness import Coordinator, HonestNode, InABatch, new_identity

# Where each cheat must be stopped: the door needs no model; the replay is the proof check.
DOOR = {"truncated, claims max_tokens", "claims more tokens than made",
        "signs for tokens it never streamed", "another job's receipt replayed",
        "signed with another node's key"}


@pytest.fixture(scope="module", params=["alone", "in a batch of 8"])
def context(request: pytest.FixtureRequest, proof_engine: Engine, tiny_model_dir: Path,
            cheat_model_dirs: dict[str, Path], checks: Coordinator) -> CheatContext:
    """Every cheat made by a node running jobs one at a time, and by one running them in batches."""
    engine = proof_engine if request.param == "alone" else InABatch(proof_engine, others=7)
    return CheatContext(engine, tiny_model_dir, cheat_model_dirs, new_identity(),  # type: ignore[arg-type]
                        HonestNode(engine, tiny_model_dir), checks.spec.weights_digest)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_is_caught_on_every_job(name: str, context: CheatContext, checks: Coordinator) -> None:
    for job in CHEAT_JOBS:
        outcome = checks.judge(job, context.cheater, CHEATS[name](context, job))
        assert outcome.caught, f"{name} passed on {job}"
        assert outcome.stage == ("door" if name in DOOR else "replay"), (job, outcome.reasons)
        assert outcome.reasons  # the evidence says why


def test_the_honest_node_passes_the_same_jobs(context: CheatContext, checks: Coordinator) -> None:
    honest = HonestNode(context.engine, context.honest_dir, context.cheater)
    for job in CHEAT_JOBS:
        report, _ = honest.run(job)
        outcome = checks.judge(job, context.cheater, report)
        assert not outcome.caught, outcome.reasons
