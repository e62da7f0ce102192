"""Nothing a node sends can crash the coordinator: token ids are checked at the door, replays
run in a child process, and a replay that crashed is quarantined with its credit held.

The crashing replayer below really kills its process with SIGSEGV, as an MLX embedding
lookup past its table did (issue 25); it runs only in the spawned child, never in pytest.
"""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path

import pytest

from coordinator.errors import InvalidRequest
from coordinator.model import JobStatus, TokenChunk
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows, node_rows
from coordinator.verification import outcomes
from coordinator.verification.isolated import ChildProcessChecker, ReplayerRecipe
from coordinator.verification.store import CheckStatus, CreditState
from node_agent.identity import load_or_create_identity
from tests.coordinator.verification.test_outcomes import (  # noqa: F401 (the service fixture)
    MODEL,
    WINDOW_S,
    _complete,
    _posted,
    _register,
    service,
)
from contracts.models import ModelSpec
from coordinator.jobs.submission import Submission
from tests.node_registration import register_node
from tests.coordinator.verification.test_outcomes import HARDWARE

VOCAB_MODEL = ModelSpec(**{**MODEL.__dict__, "model_id": "vocab", "vocab_size": 1000})


class SegfaultingReplayer:
    """Built in the replay child: holds MODEL and dies of SIGSEGV on any replay."""

    def held_models(self) -> frozenset[tuple[str, str]]:
        return frozenset({(MODEL.model_id, MODEL.weights_digest)})

    def weights_digest(self, model_id: str) -> str | None:
        return MODEL.weights_digest if model_id == MODEL.model_id else None

    def end_token_ids(self, model_id: str) -> frozenset[int]:
        return frozenset({0})

    def replay(self, *args: object) -> object:
        os.kill(os.getpid(), signal.SIGSEGV)
        raise AssertionError("unreachable: the process is gone")


def segfaulting_replayer() -> SegfaultingReplayer:
    return SegfaultingReplayer()


def _crashing_checker() -> ChildProcessChecker:
    return ChildProcessChecker(ReplayerRecipe(functools.partial(segfaulting_replayer),
                                              ((MODEL.model_id, MODEL.weights_digest),)),
                               replay_timeout_s=60, start_timeout_s=60)


def test_a_replay_that_segfaults_costs_one_check_and_its_credit_stays_held(
        service: CoordinatorService, tmp_path: Path) -> None:  # noqa: F811
    checker = _crashing_checker()
    service.checks.attach_checker(checker)
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _register(service, mallory, "mallory")
    job_id = _complete(service, mallory, draw=0.0)
    try:
        assert service.checks.run() == []  # no verdict: the child died
        check = service.checks.of_job(job_id)
        # Escalated: a peer replays it instead (peer checks are on by default), the credit held.
        assert check is not None and check.status is CheckStatus.PEER and outcomes.ESCALATED in (check.reason or "")
        assert "died" in (check.reason or "") and "exit code -11" in (check.reason or "")
        assert check.credit_state is CreditState.PENDING
        assert checker.children_started == 1
        service.clock.ms += 2 * WINDOW_S * 1000  # type: ignore[attr-defined]
        assert service.money.release_due_credits() == []  # "cannot check" is not "paid"
        assert _posted(service, "mallory") == 0
        assert service.checks.run() == [] and checker.children_started == 1  # never retried here
        assert service.checks.of_job(job_id).status is CheckStatus.PEER  # type: ignore[union-attr]
        service.clock.ms += 100 * 24 * 3600 * 1000  # type: ignore[attr-defined]
        assert service.money.release_due_credits() == []  # not even after the longer hold
    finally:
        checker.close()


class NeverCalled:
    def held_models(self) -> frozenset[tuple[str, str]]:
        return frozenset({(MODEL.model_id, MODEL.weights_digest)})

    def weights_digest(self, model_id: str) -> str | None:
        return MODEL.weights_digest

    def check(self, *args: object) -> object:
        raise AssertionError("a replay that crashed its process must not run again")


def test_a_replay_that_took_its_process_down_is_quarantined_at_the_next_start(
        service: CoordinatorService, tmp_path: Path) -> None:  # noqa: F811
    service.checks.attach_checker(NeverCalled())  # type: ignore[arg-type]
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _register(service, mallory, "mallory")
    job_id = _complete(service, mallory, draw=0.0)
    with service.db.transaction() as session:  # the last process marked it started, then died
        assert outcomes.begin_replay(session, job_id, "earlier-process", service.clock.now_ms())
    assert service.checks.run() == []  # too recent to call abandoned: left alone, not replayed
    assert service.checks.of_job(job_id).status is CheckStatus.WAITING  # type: ignore[union-attr]
    service.clock.ms += service.checks.verifier.abandoned_after_ms + 1  # type: ignore[attr-defined,union-attr]
    assert service.checks.run() == []
    check = service.checks.of_job(job_id)
    assert check is not None and check.status is CheckStatus.PEER and outcomes.ESCALATED in (check.reason or "")
    assert "never finished" in (check.reason or "") and check.credit_state is CreditState.PENDING


def test_a_token_id_outside_the_vocabulary_is_refused_and_nothing_is_stored(
        service: CoordinatorService, tmp_path: Path) -> None:  # noqa: F811
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    _register_model(service, mallory, VOCAB_MODEL)
    job = service.jobs.submit(Submission(consumer_id="c", model_id="vocab", prompt="Hello", max_tokens=8,
                                         temperature=0.0, top_p=1.0, seed=0, request_id="",
                                         min_decode_tokens_per_s=0.0)).job
    with service.db.transaction() as session:
        node = node_rows.node_by_id(session, mallory.node_id)
    assert node is not None
    for bad in (2**31 - 1, 1000):
        with pytest.raises(InvalidRequest, match=f"token id {bad} is outside the vocabulary of vocab"):
            service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, (5, bad), "ab"), prompt_tokens=2)
    with service.db.transaction() as session:
        assert job_rows.token_count(session, job.job_id) == 0
        assert job_rows.job_by_id(session, job.job_id).status is JobStatus.ASSIGNED  # type: ignore[union-attr]
    assert service.nodes.accept_tokens(node, job.job_id, TokenChunk(0, (5, 999), "ab"), prompt_tokens=2)


def _register_model(service: CoordinatorService, identity, spec: ModelSpec) -> None:  # type: ignore[no-untyped-def]
    register_node(service, identity, HARDWARE, (spec,), "mallory", max_concurrent_jobs=4)

