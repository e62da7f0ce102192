"""A node reports how much of a running job's prompt came from its prompt cache; only the node running
the job may, and never more tokens than the prompt has."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.errors import InvalidRequest, PermissionDenied
from coordinator.model import TokenChunk
from coordinator.service import CoordinatorService
from coordinator.storage import node_rows
from node_agent.identity import load_or_create_identity
from tests.coordinator.service.test_service import SMALL, _register, _submission, service  # noqa: F401 (fixture)


def test_the_running_node_reports_cached_prompt_tokens_within_its_prompt(
        tmp_path: Path, service: CoordinatorService) -> None:  # noqa: F811
    running_id = _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    other_id = _register(service, load_or_create_identity(tmp_path / "b.pem"), (SMALL,))
    job = service.jobs.submit(_submission()).job
    with service.db.transaction() as session:
        nodes = {node_id: node_rows.node_by_id(session, node_id) for node_id in (running_id, other_id)}
    running = nodes[job.node_ids[0]]
    other = nodes[other_id if job.node_ids[0] == running_id else running_id]
    assert running is not None and other is not None
    service.nodes.accept_tokens(running, job.job_id, TokenChunk(0, (1, 2), "ab"), prompt_tokens=600)
    with pytest.raises(InvalidRequest, match="cached_prompt_tokens must be from 0 to the job's 600"):
        service.nodes.note_cached_prompt(running, job.job_id, 601)
    with pytest.raises(PermissionDenied):
        service.nodes.note_cached_prompt(other, job.job_id, 512)
    assert service.jobs.get(job.job_id).job.cached_prompt_tokens == 0
    service.nodes.note_cached_prompt(running, job.job_id, 512)
    assert service.jobs.get(job.job_id).job.cached_prompt_tokens == 512
