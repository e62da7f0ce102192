"""Jobs handed from the submit's commit to node streams: early, and never twice."""

from __future__ import annotations

import threading
from pathlib import Path

from contracts.ids import JobId
from coordinator.live.assignments import JOBS_PER_STREAM_MAX, LiveAssignments
from coordinator.model import JobRecord, JobStatus
from coordinator.service import CoordinatorService
from coordinator.storage import node_rows
from node_agent.identity import load_or_create_identity
from tests.coordinator.service.test_service import SMALL, _register, _submission, service  # noqa: F401


def _job(job_id: str, *node_ids: str) -> JobRecord:
    return JobRecord(job_id=JobId(job_id), consumer_id="c", request_id=None, model_id="small",
                     prompt="Hi", max_tokens=8, temperature=0.0, top_p=1.0, seed=0,
                     min_decode_tokens_per_s=0.0, context_tokens=10, status=JobStatus.ASSIGNED,
                     created_at_ms=0, node_ids=node_ids)


def test_a_job_reaches_the_streams_of_every_node_it_was_assigned_to() -> None:
    live = LiveAssignments()
    live.publish(_job("early", "a"))  # nobody listens yet: the stream's first read finds it
    with live.subscribe("a") as a, live.subscribe("a") as a_again, live.subscribe("b") as b, \
            live.subscribe("c") as c:
        live.publish(_job("pod", "a", "b"))
        live.publish(_job("solo", "b"))
        assert [j.job_id for j in a.take()] == ["pod"] == [j.job_id for j in a_again.take()]
        assert [j.job_id for j in b.take()] == ["pod", "solo"]
        assert c.take() == [] and b.take() == []
    with live.subscribe("a") as later:
        assert later.take() == []


def test_a_full_inbox_keeps_the_newest_jobs() -> None:
    live = LiveAssignments()
    with live.subscribe("a") as inbox:
        for number in range(JOBS_PER_STREAM_MAX + 1):
            live.publish(_job(f"j{number}", "a"))
        taken = inbox.take()
        assert len(taken) == JOBS_PER_STREAM_MAX and taken[0].job_id == "j1"


def test_a_job_placed_at_submit_goes_to_the_open_stream_once(service: CoordinatorService,  # noqa: F811
                                                             tmp_path: Path) -> None:
    node_id = _register(service, load_or_create_identity(tmp_path / "a.pem"), (SMALL,))
    with service.db.read_transaction() as session:
        node = node_rows.node_by_id(session, node_id)
    assert node is not None
    open_streams = threading.Event()
    sent: list[str] = []
    stop = threading.Event()

    def stream() -> None:
        def active() -> bool:
            open_streams.set()
            return not stop.is_set()
        for job in service.nodes.assignments(node, active):
            sent.append(job.job_id)
            if len(sent) == 1:
                stop.set()
                service.notifier.notify(f"node:{node_id}")  # one more pass, which reads again

    reader = threading.Thread(target=stream)
    reader.start()
    assert open_streams.wait(30)
    with service.core.live_assignments.subscribe(node_id) as watcher:
        view = service.jobs.submit(_submission())
        assert [j.job_id for j in watcher.take()] == [view.job.job_id]  # published at commit
    reader.join(30)
    assert not reader.is_alive()
    assert view.job.status is JobStatus.ASSIGNED and sent == [view.job.job_id]
