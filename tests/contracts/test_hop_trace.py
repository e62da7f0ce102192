"""The hop trace: off by default, and a request's hops written under its job id once bound."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from contracts import hop_trace


@pytest.fixture
def trace_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "hops.trace"
    monkeypatch.setenv(hop_trace.ENVIRONMENT_VARIABLE, str(path))
    monkeypatch.setattr(hop_trace, "_file", None)
    hop_trace.open_from_environment()
    reset = hop_trace._pending.set(None)  # no request of an earlier test carries over
    yield path
    hop_trace._pending.reset(reset)
    assert hop_trace._file is not None
    hop_trace._file.close()


def test_off_unless_the_environment_names_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hop_trace.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setattr(hop_trace, "_file", None)
    hop_trace.open_from_environment()
    hop_trace.begin_request()
    hop_trace.hop("submit")
    hop_trace.bind("job-1")
    hop_trace.job_hop("job-1", "first token")
    assert not hop_trace.enabled()
    assert list(tmp_path.iterdir()) == []


def test_a_requests_hops_wait_for_its_job_id_then_are_written_in_order(trace_file: Path) -> None:
    hop_trace.hop("before any request")  # no request in this context: nothing to attach it to
    hop_trace.begin_request()
    hop_trace.hop("submit")
    hop_trace.hop("placed")
    assert not trace_file.read_text()  # nothing until the job has its id
    hop_trace.bind("job-1")
    hop_trace.job_hop("job-1", "first token")
    hop_trace.job_hop("job-2", "first token", at_ns=5)
    jobs = hop_trace.read(str(trace_file))
    assert [name for _, name in jobs["job-1"]] == ["request", "submit", "placed", "first token"]
    assert jobs["job-2"] == [(5, "first token")]
    times = [ns for ns, _ in jobs["job-1"]]
    assert times == sorted(times)
    hop_trace.bind("job-1")  # bound once: a second bind writes nothing more
    assert len(hop_trace.read(str(trace_file))["job-1"]) == 4


def test_hops_taken_on_the_submits_worker_thread_belong_to_the_request(trace_file: Path) -> None:
    """The gateway runs the submit with anyio.to_thread.run_sync: the request's context goes along."""

    def submit() -> None:
        hop_trace.hop("submit")
        hop_trace.bind("job-7")

    async def handler() -> None:
        hop_trace.begin_request()
        await anyio.to_thread.run_sync(submit)

    anyio.run(handler)
    assert [name for _, name in hop_trace.read(str(trace_file))["job-7"]] == ["request", "submit"]


def test_a_job_id_that_would_break_its_line_is_not_written(trace_file: Path) -> None:
    for bad in ("two words", "line\nbreak", ""):
        hop_trace.job_hop(bad, "first chunk read")
    hop_trace.job_hop("job-3", "first chunk read")
    assert list(hop_trace.read(str(trace_file))) == ["job-3"]
