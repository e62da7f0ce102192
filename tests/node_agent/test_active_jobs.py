"""A re-sent assignment is dropped while its job is here; a job handed back to this node runs again."""

from __future__ import annotations

import threading

from node_agent.active_jobs import ActiveJobs


def test_a_re_sent_assignment_is_dropped_while_the_job_waits_or_runs() -> None:
    active = ActiveJobs()
    assert active.admit("job-1")
    assert not active.admit("job-1")
    assert active.admit("job-2")


def test_a_job_assigned_again_after_this_node_finished_it_runs_again() -> None:
    # The coordinator handed the job back (its restart, or the node's report came too late)
    # and assigned it to this node once more: that assignment must not be taken for a copy.
    active = ActiveJobs()
    assert active.admit("job-1")
    active.finish("job-1")
    assert active.admit("job-1")


def test_a_new_registration_forgets_every_job() -> None:
    active = ActiveJobs()
    assert active.admit("job-1") and active.admit("job-2")
    active.clear()
    assert active.admit("job-1") and active.admit("job-2")


def test_of_many_concurrent_copies_of_one_assignment_exactly_one_is_admitted() -> None:
    active = ActiveJobs()
    admitted: list[bool] = []
    start = threading.Barrier(8)

    def offer() -> None:
        start.wait()
        admitted.append(active.admit("job-1"))

    threads = [threading.Thread(target=offer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(admitted) == [False] * 7 + [True]
